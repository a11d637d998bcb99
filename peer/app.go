package peer

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// peer is what the daemon keeps of an app across its processes. mu
// guards its state (the app's link, requests, contexts, calls,
// approvals, consent and rules, and duplicate window): every function
// that touches it runs with mu held (run), and none of them blocks. cur
// is read atomically outside it.
type peer struct {
	m  *Manager
	id string
	// jobs runs the app's store I/O in order, off mu: a stalled store
	// stalls this app's store requests alone.
	jobs jobs
	// cur is the current process's link, set by Attach (nil before the
	// first); Detach and Send use it without mu.
	cur atomic.Pointer[link]

	mu     sync.Mutex
	closed bool // the Manager closed: run runs nothing
	app    policy.App
	dev    bool
	link   *link // nil while no process is attached
	// contexts are every open context of the app, by id (a process being
	// torn down may still hold some).
	contexts map[string]*appContext
	// sessionTurns are the turn_ids used in each session an open context
	// holds, shared by its contexts: a turn_id is unique within a session.
	sessionTurns map[uint64]*sessionTurns
	// choices is the person's persisted consent and standing rules:
	// loaded with the peer, written through by Approve and the revokes
	// after the store has them.
	choices   appPolicy
	ask       *approval            // the pending consent prompt, if any
	waiting   []*request           // requests waiting for that prompt, in arrival order
	approvals map[string]*approval // pending, by id
	sheets    int                  // its pending host sheets (Config.MaxPendingApprovals)

	// The duplicate window: the last finished call ids, across processes.
	recentCalls idWindow
	// The req_ids that timed out at the attached kernel, whose late
	// reply may still come: one is not a new request's until then.
	lateReqs idWindow
}

func newPeer(m *Manager, id string, kept appPolicy) *peer {
	if kept.rules == nil {
		kept.rules = map[string]policy.Decision{}
	}
	return &peer{m: m, id: id, app: policy.App{ID: id}, choices: kept,
		contexts: map[string]*appContext{}, approvals: map[string]*approval{}, sessionTurns: map[uint64]*sessionTurns{}}
}

// run runs f with the peer locked; false, f not run, once the Manager
// closed the peer. f must not block: the peer's functions only queue
// (a line to a hub or to the kernel, a store job).
func (p *peer) run(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	f()
	return true
}

// after arms a deadline: step runs in a step of p once d has passed,
// unless the deadline is stopped first (Manager.stop) or p is closed.
// Manager.timers counts it until then, so that Close can wait for it.
func (p *peer) after(d time.Duration, step func()) *time.Timer {
	p.m.timers.Add(1)
	return time.AfterFunc(d, func() {
		defer p.m.timers.Done()
		p.run(step)
	})
}

// stop stops a deadline armed by after (nil: none). One that has fired
// is left to settle its own count.
func (m *Manager) stop(t *time.Timer) {
	if t != nil && t.Stop() {
		m.timers.Done()
	}
}

func (p *peer) serviceGranted(app policy.App) bool {
	return p.dev || slices.Contains(app.Grants.Services, policy.ServiceAgent)
}

// stopTimers stops what could still fire once the Manager is closed.
func (p *peer) stopTimers() {
	for id, a := range p.approvals {
		p.m.stop(a.timer)
		delete(p.approvals, id)
		p.m.unindex(id)
	}
}

// teardown retires a link whose hub is closed: the consent prompt it raised
// is withdrawn (nothing persisted), its contexts close (the kernel told),
// and its open requests end. Nothing is written to the app: its hub is
// gone.
func (p *peer) teardown(l *link) {
	if a := p.ask; a != nil && a.link == l && !a.deciding {
		p.settle(a, ApprovalCancelled)
	}
	if len(p.waiting) > 0 && p.waiting[0].link == l {
		p.waiting = nil
	}
	for _, c := range sortedValues(l.contexts, nil) {
		p.closeContext(c, "app_exited", false)
	}
	for _, r := range sortedValues(l.requests, nil) {
		r.move(reqDone)
	}
	// Every call has a context, so none should be left; if one is, it
	// still gets its outcome.
	for _, c := range l.calls {
		p.endCall(c, callCancelled, failResult(c, frame.CodeCancelled, "the app's process ended"), "")
	}
	if p.link == l {
		p.link = nil
	}
	p.cur.CompareAndSwap(l, nil)
	p.m.log.Info("link down", zap.String("app", p.id), zap.String("reason", l.reason))
}
