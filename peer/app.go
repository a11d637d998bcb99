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
// guards the fields below it; every function touching them runs under mu
// (run) and none blocks.
type peer struct {
	m    *Manager
	id   string
	jobs jobs // the app's store I/O, off mu
	// cur is the current process's link (nil before the first Attach),
	// read without mu: Detach, called from the supervisor's app
	// goroutine, must not wait for a busy peer.
	cur atomic.Pointer[link]

	mu     sync.Mutex
	closed bool // by Manager.Close: run runs nothing
	app    policy.App
	dev    bool
	link   *link // nil while no process is attached
	// contexts: all the app's, by id (a link in teardown may hold some).
	contexts map[string]*appContext
	// sessionTurns: the turn_ids of each session with an open context.
	sessionTurns map[uint64]*sessionTurns
	// choices: the persisted consent and standing rules, changed only
	// after the store has them (policy.go).
	choices   appPolicy
	ask       *approval            // the pending consent prompt
	waiting   []*request           // requests waiting for it, in arrival order
	approvals map[string]*approval // pending, by id
	sheets    int                  // pending host sheets (Config.MaxPendingApprovals)

	recentCalls idWindow // finished call ids, across processes: duplicates
	// lateReqs: req_ids that timed out at the kernel, whose late reply may
	// still come; none names a new request until then.
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
// closed the peer. f must not block (doc.go, rule 1).
func (p *peer) run(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	f()
	return true
}

// after arms a deadline: step runs in a step of p after d, unless stopped
// (Manager.stop) or p closed first. Manager.timers counts it for Close.
func (p *peer) after(d time.Duration, step func()) *time.Timer {
	p.m.timers.Add(1)
	return time.AfterFunc(d, func() {
		defer p.m.timers.Done()
		p.run(step)
	})
}

// stop stops a deadline armed by after (nil: none); one that fired
// settles its own count.
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
	}
}

// teardown retires a shut link: its consent prompt is withdrawn, its
// contexts close (the kernel told) and its requests end. Nothing is
// written to the app: its hub is gone.
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
