package supervisor

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/policy"
)

// ioDrain bounds how long a dead app's output is waited for. Normally the
// pipes reach EOF as soon as the group is gone; only a descendant that
// escaped the group (setsid) can hold them open longer.
const ioDrain = time.Second

type cmdKind int

const (
	cmdStart cmdKind = iota
	cmdStop
	cmdRestart
	// cmdReapply restarts the app if its process is still the one of
	// generation gen (whose entry Apply found changed), so that it runs
	// its new entry.
	cmdReapply
)

func (k cmdKind) String() string {
	switch k {
	case cmdStart:
		return "start"
	case cmdStop:
		return "stop"
	case cmdRestart:
		return "restart"
	case cmdReapply:
		return "reapply"
	}
	return fmt.Sprintf("command(%d)", int(k))
}

type command struct {
	kind  cmdKind
	gen   int            // cmdReapply: the process generation it is about
	reply chan cmdResult // buffered 1: the runner never blocks on it
}

type cmdResult struct {
	status AppStatus
	err    error
	// noop: a cmdReapply found nothing to restart (the process it was
	// about is gone or being stopped).
	noop bool
}

// proc is one live process of an app.
type proc struct {
	pid      int
	pidfd    *os.File
	exited   chan struct{} // closed by watchExit
	outputs  []*os.File    // read ends, closed by their readers
	ioDone   chan struct{} // closed when both readers have returned
	started  time.Time
	attached bool         // the hub went to Links
	leaf     *processLeaf // the process's cgroup leaf; nil: its process group
	// limits are the entry's limits it started with, for the reason of an
	// OOM kill.
	limits policy.ResourceLimits
	// broad: its entry's policy is broad, whose processes may leave the
	// app's session (setsid): without a leaf, the daemon's strays are
	// counted as its (procs.go).
	broad bool
	// contained: the leaf holds every process of the app, for good: a
	// jail app under Landlock cannot write a cgroup.procs (/sys is never
	// granted) nor mount one elsewhere, and its seccomp filter refuses
	// clone3 (CLONE_INTO_CGROUP would take an O_PATH fd of any cgroup,
	// which Landlock lets it open), so none leaves the leaf, and its
	// signals and kills need no scan of /proc for its session. Set once
	// it runs, with the jail's report (both layers took); false (scan)
	// until then.
	contained bool
}

// runner is one app's lifecycle. Its goroutine (run) is the only place
// that starts, signals and reaps the app's processes and moves its state,
// so commands, exits and timers are handled one at a time, in order.
type runner struct {
	s       *Supervisor
	id      string
	logs    *ring
	cmds    chan command
	pings   chan chan struct{} // Supervisor.Ping's: closed in answer (buffered 1)
	remove  chan struct{}      // closed by Apply when the app leaves the manifest
	done    chan struct{}      // closed when run returns
	settled chan struct{}      // closed once the first autostart attempt is over
	prev    <-chan struct{}    // a previous runner of the same id still stopping

	// Guarded by s.mu: Apply edits entry, Status reads status. procGen
	// counts the starts; procEntry, procDev and procEntries (the
	// manifest's entries, its neighbours' among them) are what the
	// latest one read, so what the jail of the process that is
	// starting, running or stopping was compiled from. They change only
	// on the run goroutine, with the move to starting, so that Apply
	// sees either the old entry and the old state or the new process
	// starting with the new entry.
	entry       policy.App
	status      AppStatus
	procGen     int
	procEntry   policy.App
	procDev     bool
	procEntries []policy.App // Supervisor.entries, shared
	// leafPath is the running process's leaf, where Usage reads its
	// counters ("" without one).
	leafPath string

	// Owned by the run goroutine.
	removeC, quitC <-chan struct{} // remove and s.quit until one was received
	policy         *restartPolicy
	starts         int
	proc           *proc
	stopRequested  bool
	// stopBy is when a stop's grace ends (beginStop).
	stopBy       time.Time
	stopWaiters  []chan cmdResult
	startWaiters []chan cmdResult // start once the current process is gone
	// deferred are the commands a start in progress leaves for after it
	// (cmdReapply: the process it is about must be running to restart).
	deferred  []command
	killTimer *time.Timer
	backoff   *time.Timer
	leaving   error // ErrUnknownApp (removed) or ErrShutdown once leaving
	// litter is the emptied leaf of the process collected last, which
	// tidy removes once that process's end is published (leaves are never
	// reused: cgroupTree.leaf).
	litter *processLeaf
}

func newRunner(s *Supervisor, app policy.App, prev <-chan struct{}) *runner {
	remove := make(chan struct{})
	return &runner{
		s:       s,
		id:      app.ID,
		logs:    newRing(s.cfg.LogLines),
		cmds:    make(chan command),
		pings:   make(chan chan struct{}, 1),
		remove:  remove,
		done:    make(chan struct{}),
		settled: make(chan struct{}),
		prev:    prev,
		removeC: remove,
		quitC:   s.quit,
		entry:   app,
		status:  AppStatus{ID: app.ID, State: Stopped, Since: s.cfg.Now(), Stopper: s.stopper()},
		policy:  newRestartPolicy(app.Restart),
	}
}

// shownLocked is the app's status as Status shows it (s.mu held): an
// autostart app whose first start has not begun yet (the daemon is
// still starting, or another app's start is ahead of it) is starting,
// not stopped, which would say that someone stopped it.
func (r *runner) shownLocked() AppStatus {
	st := r.status
	if st.State == Stopped && r.entry.Autostart {
		select {
		case <-r.settled:
		default:
			st.State = Starting
		}
	}
	return st
}

func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

func (r *runner) run() {
	defer r.finish()
	for r.prev != nil {
		select {
		case <-r.prev:
			r.prev = nil
		case ping := <-r.pings:
			close(ping)
		case <-r.remove:
			r.leaving = ErrUnknownApp
			close(r.settled)
			return
		case <-r.s.quit:
			r.leaving = ErrShutdown
			close(r.settled)
			return
		}
	}
	r.s.mu.Lock()
	autostart := r.entry.Autostart
	r.s.mu.Unlock()
	if autostart {
		_, _ = r.start(false) // a failure is in the app's status and the log
	}
	close(r.settled)

	for r.leaving == nil || r.proc != nil {
		if len(r.deferred) > 0 {
			c := r.deferred[0]
			r.deferred = r.deferred[1:]
			r.handle(c)
			continue
		}
		var exited chan struct{}
		if r.proc != nil {
			exited = r.proc.exited
		}
		select {
		case c := <-r.cmds:
			r.handle(c)
		case ping := <-r.pings:
			close(ping)
		case <-exited:
			r.onExit()
		case <-timerC(r.killTimer):
			r.killTimer = nil
			r.s.log.Warn("app did not stop within the grace period; killing its process group",
				zap.String("app", r.id), zap.Duration("grace", r.s.cfg.StopGrace))
			r.signal(unix.SIGKILL)
		case <-timerC(r.backoff):
			r.backoff = nil
			_, _ = r.start(true)
		case <-r.removeC:
			r.removeC, r.quitC = nil, nil
			r.leave(ErrUnknownApp)
		case <-r.quitC:
			r.removeC, r.quitC = nil, nil
			r.leave(ErrShutdown)
		}
	}
}

// leave stops the app for good: it was removed, or the daemon is going.
func (r *runner) leave(why error) {
	r.leaving = why
	r.cancelBackoff("")
	r.replyAll(&r.startWaiters, cmdResult{err: fmt.Errorf("start %s: %w", r.id, why)})
	if r.proc != nil && !r.stopRequested {
		r.beginStop()
	}
}

func (r *runner) finish() {
	r.tidy()
	if r.killTimer != nil {
		r.killTimer.Stop()
	}
	r.cancelBackoff("")
	why := r.leaving
	if why == nil {
		why = ErrShutdown
	}
	r.replyAll(&r.stopWaiters, cmdResult{status: r.snapshot()})
	r.replyAll(&r.startWaiters, cmdResult{err: fmt.Errorf("start %s: %w", r.id, why)})
	for _, c := range r.deferred {
		c.reply <- cmdResult{status: r.snapshot(), err: fmt.Errorf("%s %s: %w", c.kind, r.id, why)}
	}
	r.deferred = nil
	r.s.mu.Lock()
	delete(r.s.removing, r)
	r.s.mu.Unlock()
	close(r.done)
}

func (r *runner) handle(c command) {
	if r.leaving != nil {
		c.reply <- cmdResult{status: r.snapshot(), err: fmt.Errorf("%s %s: %w", c.kind, r.id, r.leaving)}
		return
	}
	state := r.snapshot().State
	switch c.kind {
	case cmdStart, cmdRestart:
		switch {
		case state == Running && c.kind == cmdStart:
			c.reply <- cmdResult{status: r.snapshot()}
		case state == Running:
			r.beginStop()
			r.startWaiters = append(r.startWaiters, c.reply)
		case state == Stopping:
			r.startWaiters = append(r.startWaiters, c.reply)
		default: // stopped or failed
			r.cancelBackoff("")
			st, err := r.start(false)
			c.reply <- cmdResult{status: st, err: err}
		}
	case cmdStop:
		switch state {
		case Running:
			r.beginStop()
			r.stopWaiters = append(r.stopWaiters, c.reply)
		case Stopping:
			r.stopWaiters = append(r.stopWaiters, c.reply)
		default:
			r.cancelBackoff("automatic restart cancelled by stop")
			c.reply <- cmdResult{status: r.snapshot()}
		}
	case cmdReapply:
		switch {
		case r.proc == nil || r.procGen != c.gen:
			// Gone, or replaced by a start that read the new entry.
			c.reply <- cmdResult{status: r.snapshot(), noop: true}
		case state == Running:
			r.s.log.Info("restarting app: its entry changed", zap.String("app", r.id))
			r.beginStop()
			r.startWaiters = append(r.startWaiters, c.reply)
		case state == Stopping && len(r.startWaiters) > 0:
			// A restart under way: its start reads the new entry.
			r.startWaiters = append(r.startWaiters, c.reply)
		default: // being stopped: its next start reads the new entry
			c.reply <- cmdResult{status: r.snapshot(), noop: true}
		}
	}
}

// markStale records in the app's status what of its entry changed since
// its process of generation gen started, unless that process is gone.
func (r *runner) markStale(gen int, changed []string) (AppStatus, bool) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st := r.status.State; {
	case r.procGen != gen, st != Starting && st != Running && st != Stopping:
		return r.status, false
	}
	r.status.Stale = changed
	return r.status, true
}

// afterPublish follows the state change that ends a process. It first
// yields: the goroutines Publish woke (a control connection's writer,
// when the event could not be written at once) were made runnable on
// this goroutine's processor, and would otherwise wait until this
// goroutine blocks, or until another processor steals them, while it
// tidies and logs. That
// changes when things run, never what happens. Then it tidies.
func (r *runner) afterPublish() {
	runtime.Gosched()
	r.tidy()
}

// cancelBackoff drops a pending automatic restart; a non-empty reason
// replaces the status's "restarting in …".
func (r *runner) cancelBackoff(reason string) {
	if r.backoff == nil {
		return
	}
	r.backoff.Stop()
	r.backoff = nil
	if reason != "" {
		r.move(Stopped, func(st *AppStatus) { st.Reason = reason })
	}
}

func (r *runner) replyAll(waiters *[]chan cmdResult, res cmdResult) {
	for _, w := range *waiters {
		w <- res
	}
	*waiters = nil
}

func (r *runner) snapshot() AppStatus {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.status
}

// move is the one place that changes an app's state. It refuses an
// illegal move (a bug, logged loudly) and publishes a state event.
func (r *runner) move(to State, edit func(*AppStatus)) AppStatus {
	s := r.s
	s.mu.Lock()
	st, err := r.moveLocked(to, edit)
	s.mu.Unlock()
	r.moved(err)
	return st
}

// moveLocked is move with s.mu held. A refused move goes to moved, which
// the caller calls once it let go of the lock, to be logged.
func (r *runner) moveLocked(to State, edit func(*AppStatus)) (st AppStatus, err error) {
	s := r.s
	if err := checkMove(r.status.State, to); err != nil {
		return r.status, err
	}
	r.status.State = to
	r.status.Since = s.cfg.Now()
	r.status.Seq = s.stateSeq.Add(1)
	if to == Stopped || to == Failed {
		// No process: the next start runs the entry as it is.
		r.status.Stale = nil
	}
	edit(&r.status)
	st = r.status
	// Published under s.mu so that Publish has the states in the order
	// Status does.
	s.publish(Event{Kind: KindState, State: &st})
	return st, nil
}

// moved logs a move moveLocked refused, with s.mu released.
func (r *runner) moved(err error) {
	if err != nil {
		r.s.log.DPanic("refused state change", zap.String("app", r.id), zap.Error(err))
	}
}
