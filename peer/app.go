package peer

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// peer is what the daemon keeps of an app across its processes. Its state
// is touched only by the functions run on in (post, call): the app's link,
// requests, contexts, calls, approvals, consent cache and duplicate
// window have that one owner, and no lock. Outside in, only cur
// (atomically) and status (under statusMu) are read, and in and jobs
// posted to.
type peer struct {
	m  *Manager
	id string
	in serial
	// jobs runs the app's store I/O in order, off in: a stalled store
	// stalls this app's requests alone.
	jobs serial
	// cur is the current process's link, set by Attach under m.mu (nil
	// before the first); Detach and Send use it.
	cur atomic.Pointer[link]
	// status is what LinkStatus reports, published by in after each of
	// its functions. A value under a lock, not a pointer swapped: it
	// changes twice a tool call (outstanding_calls), and a snapshot for
	// each was two allocations a call.
	statusMu sync.Mutex
	status   control.LinkStatus

	// Owned by in.
	app     policy.App
	devMode bool
	link    *link // nil while no process is attached
	// contexts are every open context of the app, by id (a process being
	// torn down may still hold some).
	contexts map[string]*appContext
	// sessionTurns are the turn_ids used in each session an open context
	// holds, shared by its contexts: a turn_id is unique within a session.
	sessionTurns map[uint64]*sessionTurns
	consent      consentCache
	// consentGen moves when the cached decision is dropped (revoke), so
	// that a read from before does not fill the cache again.
	consentGen uint64
	// While the decision is being read (consentReading), the link's lines
	// wait in parked, in order; consentErr is a failed read's error while
	// they run.
	consentReading bool
	parked         []func()
	consentErr     error
	ask            *approval            // the pending consent prompt, if any
	waiting        []*request           // requests waiting for that prompt, in arrival order
	approvals      map[string]*approval // pending, by id
	sheets         int                  // its pending host sheets (Config.MaxPendingApprovals)
	// rulesGen moves when a standing rule of the app is set or revoked: a
	// rule read from before is read again.
	rulesGen uint64

	// The duplicate window: the last finished call ids, across processes.
	recentCalls map[string]struct{}
	recentRing  []string
	recentNext  int
}

func newPeer(m *Manager, id string) *peer {
	p := &peer{m: m, id: id, app: policy.App{ID: id},
		contexts: map[string]*appContext{}, approvals: map[string]*approval{}, sessionTurns: map[uint64]*sessionTurns{}}
	p.in.after = p.publish // every function of the peer ends in it
	return p
}

// post runs f on the peer's serial, later; false when the Manager is
// closed. It never blocks.
func (p *peer) post(f func()) bool {
	return p.in.post(f)
}

// do runs f on the peer's serial, at once when it is idle (serial.do).
func (p *peer) do(f func()) bool {
	return p.in.do(f)
}

// call runs f on the peer's serial and waits for it; false when the
// Manager is closed (f did not run). The peer's functions never block,
// so neither does call for long.
func (p *peer) call(f func()) bool {
	return p.in.call(f)
}

// store queues a store job of the app; false when the Manager is closed.
func (p *peer) store(job func()) bool {
	return p.jobs.post(func() {
		if g := p.m.storeGate; g != nil {
			g(p.id)
		}
		job()
	})
}

// publish updates status when it changed. A link Attach made that the
// peer has not taken yet keeps the status Attach set.
func (p *peer) publish() {
	if p.link != p.cur.Load() {
		return
	}
	var st control.LinkStatus
	if l := p.link; l != nil && p.serviceGranted(p.app) {
		// A process without agent.octos has a hub (its pass-through
		// frames flow) but no peer link: no request of it is served.
		st = control.LinkStatus{Connected: true, Contexts: len(l.contexts), OutstandingCalls: len(l.calls)}
	}
	p.setStatus(st)
}

func (p *peer) setStatus(st control.LinkStatus) {
	p.statusMu.Lock()
	p.status = st
	p.statusMu.Unlock()
}

func (p *peer) serviceGranted(app policy.App) bool {
	return p.devMode || slices.Contains(app.Grants.Services, policy.ServiceAgent)
}

// attached takes the link of a new process (Attach shut the old one,
// whose teardown comes on its own).
func (p *peer) attached(l *link, entry policy.App, dev bool) {
	p.link = l
	p.app, p.devMode = entry, dev
	p.m.log.Info("link up", zap.String("app", p.id), zap.Bool("service", p.serviceGranted(entry)))
}

// setEntry applies a manifest's entry of the app; narrow, to the live
// link.
func (p *peer) setEntry(entry policy.App, dev bool, narrow bool) {
	old, oldDev := p.app, p.devMode
	p.app, p.devMode = entry, dev
	if narrow {
		p.narrow(old, oldDev)
	}
}

// stopTimers stops what could still fire once the Manager is closed.
func (p *peer) stopTimers() {
	for id, a := range p.approvals {
		if a.timer != nil {
			a.timer.Stop()
		}
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
	contexts := make([]*appContext, 0, len(l.contexts))
	for _, c := range l.contexts {
		contexts = append(contexts, c)
	}
	slices.SortFunc(contexts, func(a, b *appContext) int { return strings.Compare(a.id, b.id) })
	for _, c := range contexts {
		p.closeContext(c, "app_exited", false)
	}
	for _, r := range sortedRequests(l.requests) {
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
