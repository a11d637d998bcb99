package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/jail"
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
	// counts the starts; procEntry, procDev and procNeighbours are what
	// the latest one read, so what the jail of the process that is
	// starting, running or stopping was compiled from. They change only on the run goroutine, with the move to
	// starting, so that Apply sees either the old entry and the old
	// state or the new process starting with the new entry.
	entry          policy.App
	status         AppStatus
	procGen        int
	procEntry      policy.App
	procDev        bool
	procNeighbours []policy.App
	// leafPath is the running process's leaf, where Status reads its
	// usage ("" without one).
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

// confirmResult is what a process's Confirm said.
type confirmResult struct {
	report jail.Report
	err    error
}

// confirmAsync runs Confirm in a goroutine the supervisor owns (s.io), so
// that a helper that never reports cannot hold the app's goroutine.
func (r *runner) confirmAsync(c confirmer) <-chan confirmResult {
	ch := make(chan confirmResult, 1)
	if s, ok := c.(settled); ok && s.Settled() {
		// Known already (the in-process spawn): no goroutine to wait on.
		rep, err := c.Confirm()
		r.serveGuard(c, err)
		ch <- confirmResult{rep, err}
		return ch
	}
	r.s.io.Add(1)
	go func() {
		defer r.s.io.Done()
		rep, err := c.Confirm()
		r.serveGuard(c, err)
		ch <- confirmResult{rep, err}
	}()
	return ch
}

// guarded is a confirmer whose jail hands some calls to the daemon
// (*jail.Process).
type guarded interface{ Guard() *jail.Guard }

// serveGuard answers the process's notified calls (bind, listen,
// inotify_add_watch) from a goroutine the supervisor owns, until the
// app's last process exits or the supervisor has stopped every app.
func (r *runner) serveGuard(c confirmer, confirmErr error) {
	gp, ok := c.(guarded)
	if !ok || confirmErr != nil {
		return
	}
	g := gp.Guard()
	if g == nil {
		return
	}
	r.s.io.Add(1)
	go func() {
		defer r.s.io.Done()
		if err := g.Serve(r.s.guards); err != nil && !errors.Is(err, context.Canceled) {
			r.s.log.Warn("jail guard failed: the app's bind, listen and inotify calls now fail", zap.String("app", r.id), zap.Error(err))
		}
	}()
}

// drainConfirm waits, bounded, for Confirm after the process is dead,
// which closes the jail's status pipe: its only writer was the helper, so
// it reaches EOF at once. It returns the result, or ok false if none came.
func (r *runner) drainConfirm(ch <-chan confirmResult, pid int) (confirmResult, bool) {
	t := time.NewTimer(ioDrain)
	defer t.Stop()
	select {
	case res := <-ch:
		return res, true
	case <-t.C:
		r.s.log.Warn("jail status of a dead app process is still open; leaving it to its reader",
			zap.String("app", r.id), zap.Int("pid", pid))
		return confirmResult{}, false
	}
}

// discard kills and reaps a process the runner cannot supervise (no
// usable pidfd), closes its pidfd and consumes its jail status.
func (r *runner) discard(sp spawned) {
	if sp.pidfd >= 0 {
		_ = unix.PidfdSendSignal(sp.pidfd, unix.SIGKILL, nil, 0)
		f := os.NewFile(uintptr(sp.pidfd), "pidfd:"+r.id)
		if _, err := reap(f, r.s.cfg.Now()); err != nil {
			r.s.log.Error("cannot reap a discarded app process", zap.String("app", r.id), zap.Int("pid", sp.pid), zap.Error(err))
		}
		f.Close()
	} else if sp.pid > 0 {
		_ = unix.Kill(sp.pid, unix.SIGKILL)
		for {
			_, err := unix.Wait4(sp.pid, nil, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				if err != nil {
					r.s.log.Error("cannot reap a discarded app process", zap.String("app", r.id), zap.Int("pid", sp.pid), zap.Error(err))
				}
				break
			}
		}
	}
	if sp.confirm != nil {
		r.drainConfirm(r.confirmAsync(sp.confirm), sp.pid)
	}
}

// start launches a process for the app and waits until it runs the app's
// program or has failed. auto says the restart policy asked for it; any
// other start resets the policy's history. While it waits it still
// serves the app's commands, its removal and shutdown (see awaitStart).
func (r *runner) start(auto bool) (AppStatus, error) {
	if !auto {
		r.policy.Reset()
	}
	a := r.beginStart()
	c, err := newCaptures(r.id)
	if err != nil {
		return r.fail(nil, err)
	}
	leaf, leafDir, limits := r.newLeaf(a.entry.Limits)
	var refuse error
	if unheld := unheldLimits(a.entry.Limits, limits, os.Geteuid() == 0); len(unheld) > 0 {
		// A bound the entry sets is held or the app does not run:
		// whatever the strictness, which decides only the weights.
		lack := r.s.limitsLack()
		if os.Geteuid() == 0 && slices.ContainsFunc(unheld, func(u string) bool { return strings.HasPrefix(u, "tasks_max ") }) {
			lack += "; RLIMIT_NPROC does not hold a root daemon's apps"
		}
		refuse = fmt.Errorf("limits: %s cannot be held here (%s): remove it from the entry to run the app without it, or run octosupd where its cgroup has the controller (docs/limits.md)",
			strings.Join(unheld, ", "), lack)
	} else if len(limits.Missing) > 0 && strictLimits(a.entry, r.s.cfg.Strictness) {
		refuse = fmt.Errorf("limits: %s missing and the app is strict: %s", strings.Join(limits.Missing, ", "), r.s.limitsLack())
	}
	if refuse != nil {
		c.closeChild()
		c.closeDaemon()
		if leafDir != nil {
			leafDir.Close()
		}
		r.removeLeaf(leaf)
		return r.fail(nil, refuse)
	}
	sp, err := r.spawn(a, c, leafDir)
	if err != nil {
		c.closeDaemon()
		r.discard(sp)
		r.s.mu.Lock()
		r.s.spawnedLocked()
		r.s.mu.Unlock()
		r.removeLeaf(leaf)
		return r.fail(nil, err)
	}
	if !limits.heldByPids() {
		r.fallbackNproc(sp.pid, a.entry.Limits, &limits)
	}
	r.supervise(a, sp, c, leaf)

	// Signalling the group and the session must never reach the daemon's.
	pg, err := unix.Getpgid(sp.pid)
	if err == nil && pg == sp.pid {
		var sid int
		if sid, err = unix.Getsid(sp.pid); err == nil && sid != sp.pid {
			a.foreignGroup = true
			return r.abort(a, fmt.Errorf("process does not lead a session of its own (sid %d): the launcher must call setsid", sid))
		}
	}
	if err == nil && pg != sp.pid {
		a.foreignGroup = true
		return r.abort(a, fmt.Errorf("process is not in its own process group (pgid %d): the launcher must call setsid", pg))
	}
	r.move(Starting, func(st *AppStatus) {
		st.Pid = sp.pid
		st.Limits = &limits
		if leaf == nil {
			st.Stopper = StopperProcessGroup
		} else {
			r.leafPath = leaf.path
		}
	})
	if leaf != nil && r.s.tasks != nil && limits.heldByPids() {
		r.s.tasks.add(r, leaf.path, tasksMax(a.entry.Limits))
	}
	return r.awaitStart(a)
}

// attempt is one start, from the move to starting until the process runs
// the app's program or is gone.
type attempt struct {
	entry      policy.App
	dev        bool
	neighbours []policy.App
	restarts   int
	now        time.Time
	// Once the process is forked: the daemon's end of its hub, and its
	// jail's report (nil once taken).
	hub       *os.File
	confirmed <-chan confirmResult
	// foreignGroup: the process is not its group's leader, so only it
	// (not "its" group) may be signalled.
	foreignGroup bool
	joined       []chan cmdResult // Start and Restart that arrived meanwhile
}

// beginStart moves the app to starting and reads the entry the start
// runs: Apply, under the same lock, sees either this start with the
// entry it read, or the state before it (and the next start then reads
// Apply's entry).
func (r *runner) beginStart() *attempt {
	s := r.s
	a := &attempt{now: s.cfg.Now(), restarts: r.starts}
	r.starts++
	s.mu.Lock()
	a.entry, a.dev = r.entry, s.devMode
	a.neighbours = s.entriesLocked(r.id)
	r.procGen++
	r.procEntry, r.procDev, r.procNeighbours = a.entry, a.dev, a.neighbours
	_, dropped, moveErr := r.moveLocked(Starting, func(st *AppStatus) {
		st.Pid, st.Restarts, st.Reason, st.Jail, st.Stopper, st.Stale, st.Limits = 0, a.restarts, "", nil, s.stopper(), nil, nil
	})
	s.mu.Unlock()
	r.moved(dropped, moveErr)
	r.policy.Started(a.now, a.entry.Restart)
	return a
}

// spawn forks the app's process on the spawner thread, with the child's
// ends of c and the leaf (leafDir, nil for none), which it closes. On an
// error what was forked, if anything, is in sp for discard, and s.spawning
// is still counted.
func (r *runner) spawn(a *attempt, c *captures, leafDir *os.File) (spawned, error) {
	s := r.s
	cgroupFD := -1
	if leafDir != nil {
		cgroupFD = int(leafDir.Fd())
	}
	reply := make(chan spawnResult, 1)
	// Until the process is in s.pids or gone, CheckPeer does not place a
	// child of the daemon: it may be this one.
	s.mu.Lock()
	s.spawning++
	s.mu.Unlock()
	s.spawnReqs <- spawnRequest{
		req: jail.Request{
			App: a.entry, Neighbours: a.neighbours, DeveloperMode: a.dev, Dirs: s.cfg.Dirs, BaseEnv: s.cfg.BaseEnv,
			Stdout: c.outW, Stderr: c.errW, Hub: c.hubChild, CgroupFD: cgroupFD,
		},
		reply: reply,
	}
	res := <-reply
	c.closeChild()
	if leafDir != nil {
		leafDir.Close()
	}
	sp := res.proc
	switch {
	case res.err != nil:
		return sp, res.err
	case sp.confirm == nil:
		return sp, errors.New("launcher returned no process and no error (a launcher bug)")
	case sp.pidfd < 0:
		// Without a pidfd the process can be neither waited for the
		// netpoller way nor signalled safely; the launcher must use
		// CLONE_PIDFD (Linux 5.3+).
		return sp, errors.New("launcher returned no pidfd (octosup needs Linux 5.3 or later)")
	}
	if err := unix.SetNonblock(sp.pidfd, true); err != nil {
		return sp, fmt.Errorf("pidfd: %w", err)
	}
	return sp, nil
}

// supervise makes sp the app's process: in s.pids, its exit watched, its
// output read and its jail's report awaited, by goroutines s.io owns.
func (r *runner) supervise(a *attempt, sp spawned, c *captures, leaf *processLeaf) {
	s := r.s
	p := &proc{
		pid:     sp.pid,
		pidfd:   os.NewFile(uintptr(sp.pidfd), "pidfd:"+r.id),
		exited:  make(chan struct{}),
		outputs: []*os.File{c.outR, c.errR},
		ioDone:  make(chan struct{}),
		started: a.now,
		leaf:    leaf,
		limits:  a.entry.Limits,
		broad:   a.entry.Sandbox.Policy == policy.PolicyBroad,
	}
	r.proc = p
	s.mu.Lock()
	s.pids[p.pid] = r
	s.spawnedLocked()
	s.mu.Unlock()
	a.hub = c.hub
	a.confirmed = r.confirmAsync(sp.confirm)
	s.io.Add(3)
	go func() {
		defer s.io.Done()
		watchExit(p.pidfd, p.exited, s.log, r.id, p.pid)
	}()
	var open atomic.Int32
	open.Store(2)
	for i, stream := range []string{"stdout", "stderr"} {
		f := p.outputs[i]
		go func() {
			defer s.io.Done()
			readLines(f, r.emitter(stream))
			if open.Add(-1) == 0 {
				close(p.ioDone)
			}
		}()
	}
}

// cancelledStart is the cause of a start that was called off (a stop,
// the app's removal, shutdown) rather than one that failed: abort leaves
// the app stopped, not failed.
type cancelledStart struct{ err error }

func (e cancelledStart) Error() string { return e.err.Error() }
func (e cancelledStart) Unwrap() error { return e.err }

// abort ends a start whose process is live, for cause: it kills the
// process (its group, or itself alone when the group is not its own),
// closes its hub, waits for its exit, collects it, consumes its jail's
// report (unless taken), moves the app to failed (stopped when cause is
// a cancelledStart), tidies the leaf and answers the starts that joined.
func (r *runner) abort(a *attempt, cause error) (AppStatus, error) {
	p := r.proc
	if a.foreignGroup {
		// The pid cannot have been reused: the leader is not reaped yet.
		_ = unix.Kill(p.pid, unix.SIGKILL)
	} else {
		r.signal(unix.SIGKILL)
	}
	a.hub.Close()
	<-p.exited
	exit := r.collect()
	if a.confirmed != nil {
		r.drainConfirm(a.confirmed, p.pid)
	}
	var st AppStatus
	var err error
	var cancelled cancelledStart
	if errors.As(cause, &cancelled) {
		why := cancelled.err
		r.s.log.Info("app start cancelled", zap.String("app", r.id), zap.Int("pid", p.pid), zap.Error(why))
		st = r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, why.Error() })
		err = &startError{id: r.id, reason: why.Error(), cause: why}
	} else {
		st, err = r.fail(&exit, cause)
	}
	r.tidy()
	r.replyAll(&a.joined, cmdResult{status: st, err: err})
	return st, err
}

// awaitStart waits for the jail's report on the process just started,
// then lets it run. A start that cannot go on is aborted.
func (r *runner) awaitStart(a *attempt) (AppStatus, error) {
	res, stop, cause := r.awaitReport(a)
	if cause == nil && res.err != nil {
		a.confirmed = nil // taken
		cause = res.err
	}
	if cause != nil {
		st, err := r.abort(a, cause)
		if stop != nil {
			stop <- cmdResult{status: st}
		}
		return st, err
	}
	return r.running(a, res.report)
}

// awaitReport waits for the jail's report. The app's goroutine keeps
// serving it meanwhile: a Start or Restart joins this start, a Stop (its
// reply is stop), the app's removal or shutdown cancels it, and so does
// Config.StartTimeout running out: then cause says why.
func (r *runner) awaitReport(a *attempt) (res confirmResult, stop chan cmdResult, cause error) {
	s, p := r.s, r.proc
	timeout := time.NewTimer(s.cfg.StartTimeout)
	defer timeout.Stop()
	for {
		select {
		case res = <-a.confirmed:
			return res, nil, nil
		case <-p.exited:
			// The process died before its report was read; the report (or
			// the helper's failure) is in the pipe, which is at EOF now.
			if got, ok := r.drainConfirm(a.confirmed, p.pid); ok {
				return got, nil, nil
			}
			return confirmResult{err: fmt.Errorf("jail: %w", jail.ErrHelperDied)}, nil, nil
		case <-timeout.C:
			return res, nil, &reasonError{
				reason: fmt.Sprintf("jail helper did not report within %s; its process group was killed", s.cfg.StartTimeout),
				err:    ErrStartTimeout,
			}
		case ping := <-r.pings:
			close(ping)
		case c := <-r.cmds:
			switch c.kind {
			case cmdStart, cmdRestart:
				a.joined = append(a.joined, c.reply)
			case cmdReapply:
				r.deferred = append(r.deferred, c)
				if h := s.deferHook; h != nil {
					h()
				}
			case cmdStop:
				return res, c.reply, cancelledStart{errors.New("stopped while starting")}
			}
		case <-r.removeC:
			r.removeC, r.quitC = nil, nil
			r.leaving = ErrUnknownApp
			return res, nil, cancelledStart{fmt.Errorf("start cancelled: %w", ErrUnknownApp)}
		case <-r.quitC:
			r.removeC, r.quitC = nil, nil
			r.leaving = ErrShutdown
			return res, nil, cancelledStart{fmt.Errorf("start cancelled: %w", ErrShutdown)}
		}
	}
}

// running moves a started app to running with its jail's report and
// hands its hub to Links.
func (r *runner) running(a *attempt, report jail.Report) (AppStatus, error) {
	s, p := r.s, r.proc
	st := r.move(Running, func(st *AppStatus) { st.Pid, st.Jail = p.pid, &report })
	s.log.Info("app started", zap.String("app", r.id), zap.Int("pid", p.pid),
		zap.Strings("jail_layers", report.Layers), zap.Strings("jail_missing", report.Missing),
		zap.Int("landlock_abi", report.LandlockABI), zap.Int("restarts", a.restarts))
	for _, g := range report.Grants {
		// Which way each desktop grant went, and what a compositor
		// without a security context then gives the app (docs/jail.md).
		fields := []zap.Field{zap.String("app", r.id), zap.String("grant", g.Name), zap.String("path", g.Path), zap.String("via", g.Via)}
		if g.Name == policy.SocketWayland && g.Via == jail.GrantGuard {
			fields = append(fields, zap.String("compositor_sees", "the daemon, with no security context: the app may use every protocol the compositor offers its clients"))
		}
		s.log.Info("app desktop grant", fields...)
	}
	if l := st.Limits; l != nil && len(l.Missing) > 0 {
		// Never silent: a limit of the entry that does not hold the app.
		s.log.Warn("app runs without some of its limits", zap.String("app", r.id), zap.Strings("missing", l.Missing),
			zap.String("limiter", l.Limiter), zap.Strings("applied", l.Applied))
	}
	if s.cfg.Links != nil {
		p.attached = true
		r.hook("Attach", func() { s.cfg.Links.Attach(a.entry, a.hub) })
	} else {
		a.hub.Close()
	}
	r.replyAll(&a.joined, cmdResult{status: st})
	return st, nil
}

// slowHook is how long a LinkHandler call may take before it is logged.
const slowHook = time.Second

// hook runs a LinkHandler call and logs it when it broke its contract of
// returning promptly.
func (r *runner) hook(name string, call func()) {
	t0 := time.Now()
	call()
	if d := time.Since(t0); d > r.s.slowHook {
		r.s.log.Warn("link handler is slow: the app's supervision waited for it",
			zap.String("app", r.id), zap.String("call", name), zap.Duration("took", d))
	}
}

// startError is a failed start: it wraps ErrStartFailed and the cause, so
// that callers can branch on either, and reads as the reason status shows.
type startError struct {
	id, reason string
	cause      error
}

func (e *startError) Error() string {
	return "start " + e.id + ": " + ErrStartFailed.Error() + ": " + e.reason
}

func (e *startError) Unwrap() []error { return []error{ErrStartFailed, e.cause} }

// reasonError reads as reason and wraps err, a sentinel the reason
// explains.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.reason }
func (e *reasonError) Unwrap() error { return e.err }

func (r *runner) fail(exit *Exit, cause error) (AppStatus, error) {
	// The launcher's errors start with "start <id>: ", as ours do.
	reason := strings.TrimPrefix(cause.Error(), "start "+r.id+": ")
	r.s.log.Error("app failed to start", zap.String("app", r.id), zap.String("reason", reason))
	st := r.move(Failed, func(st *AppStatus) {
		st.Pid, st.Reason = 0, reason
		if exit != nil {
			st.LastExit = exit
		}
	})
	return st, &startError{id: r.id, reason: reason, cause: cause}
}

func (r *runner) emitter(stream string) func(string) {
	return func(text string) {
		dropped := 0
		r.logs.add(LogLine{App: r.id, Stream: stream, Text: text}, &r.s.logSeq, r.s.cfg.Now, func(l LogLine) {
			dropped = r.s.subs.publish(Event{Kind: KindLog, Log: &l})
		})
		r.s.log.Info("app output", zap.String("app", r.id), zap.String("stream", stream), zap.String("text", text))
		r.s.logDropped(dropped)
	}
}

func (r *runner) beginStop() {
	r.stopRequested = true
	r.move(Stopping, func(*AppStatus) {})
	r.stopBy = time.Now().Add(r.s.cfg.StopGrace)
	r.signal(unix.SIGTERM)
	r.killTimer = time.NewTimer(r.s.cfg.StopGrace)
}

// signal sends sig to every process of the app: its main process
// through its pidfd (wherever it went), its process group, its session
// and their descendants (procs.go; a broad app's strays too without a
// leaf), and its cgroup leaf: cgroup.kill for SIGKILL, each process in
// cgroup.procs for any other. Only the run goroutine calls it, and only
// while the leader is unreaped: its pid is the group's and the session's
// id, which no other process can have meanwhile.
func (r *runner) signal(sig unix.Signal) {
	p := r.proc
	r.signalKnown(sig)
	_, fds, err := r.s.signalFamily(p.pid, p.broad && p.leaf == nil, sig)
	closeFds(fds)
	if err != nil {
		r.s.log.Error("cannot find the app's processes", zap.String("app", r.id), zap.Error(err))
	}
}

// signalKnown is signal without the scan for the app's processes: its
// main process, its process group and its cgroup leaf.
func (r *runner) signalKnown(sig unix.Signal) {
	p := r.proc
	if err := pidfdSignal(p.pidfd, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		r.s.log.Error("cannot signal app", zap.String("app", r.id), zap.Error(err))
	}
	if err := killGroup(p.pid, sig); err != nil {
		r.s.log.Error("cannot signal app", zap.String("app", r.id), zap.Error(err))
	}
	if p.leaf == nil {
		return
	}
	var err error
	if sig == unix.SIGKILL {
		err = p.leaf.killAll()
	} else {
		err = signalLeaf(p.leaf.path, sig)
	}
	if err != nil {
		r.s.log.Error("cannot signal app's cgroup", zap.String("app", r.id), zap.Error(err))
	}
}

// awaitRest gives what is left of a stopping app, once its main process
// has exited, the rest of the stop's grace to end by itself (the SIGTERM
// reached it too), as systemd's KillMode=control-group does; a process
// it forks meanwhile is not waited for. Without a stop it returns at once:
// the rest of an app dies with its main process.
func (r *runner) awaitRest() {
	p := r.proc
	left := time.Until(r.stopBy)
	if !r.stopRequested || left <= 0 {
		return
	}
	if p.leaf != nil {
		_ = p.leaf.awaitEmpty(left) // what is left is killed next
		return
	}
	_, fds, err := r.s.signalFamily(p.pid, p.broad, 0)
	if err == nil {
		awaitExits(fds, left)
	}
	closeFds(fds)
}

// killRest SIGKILLs what is left of the app once its main process has
// exited (unreaped), until nothing is (procs.go's killFamily, bounded).
func (r *runner) killRest() {
	p := r.proc
	// killFamily's first round scans and kills the rest: no scan here.
	r.signalKnown(unix.SIGKILL)
	left, err := r.s.killFamily(p.pid, p.broad && p.leaf == nil)
	switch {
	case err != nil:
		r.s.log.Error("cannot find the app's processes", zap.String("app", r.id), zap.Error(err))
	case left > 0:
		r.s.log.Warn("processes of the app outlived the kill step", zap.String("app", r.id), zap.Int("left", left), zap.Duration("waited", killDrain))
	}
}

// newLeaf makes the cgroup leaf of the next process, writes the entry's
// limits into it and opens it for the fork (the caller closes dir once
// the fork is done); nil and nil where the process group is the stopper,
// or where the leaf could not be made (that process then falls back to
// its group, logged, and its status says so). The report says which
// limits took.
func (r *runner) newLeaf(lim policy.ResourceLimits) (leaf *processLeaf, dir *os.File, rep LimitsReport) {
	s := r.s
	if s.cgroups == nil {
		return nil, nil, noCgroupLimits(lim)
	}
	path, dir, err := s.cgroups.leaf(r.id)
	if err == nil {
		if leaf, err = openProcessLeaf(path, dir); err != nil {
			dir.Close()
			_ = os.Remove(path)
		}
	}
	if err != nil {
		s.log.Warn("app process falls back to its process group", zap.String("app", r.id), zap.Error(err))
		return nil, nil, noCgroupLimits(lim)
	}
	rep, err = writeLimits(int(dir.Fd()), lim, s.cgroups.controllers, false)
	if err != nil {
		s.log.Warn("app's cgroup refused limits", zap.String("app", r.id), zap.Error(err))
	}
	return leaf, dir, rep
}

// fallbackNproc holds the process pid to its tasks_max with RLIMIT_NPROC
// (limitNproc) where the pids controller does not, and notes it in rep.
func (r *runner) fallbackNproc(pid int, lim policy.ResourceLimits, rep *LimitsReport) {
	if os.Geteuid() == 0 {
		// The kernel exempts uid 0 from RLIMIT_NPROC: setting it would
		// report a limit that holds nothing.
		rep.addMissing("pids")
		r.s.log.Warn("app runs without a task limit: the daemon runs as root, whose apps RLIMIT_NPROC does not hold, and has no pids controller",
			zap.String("app", r.id), zap.Int("tasks_max", tasksMax(lim)))
		return
	}
	applied, err := limitNproc(pid, tasksMax(lim))
	if err != nil {
		r.s.log.Warn("app runs without a task limit", zap.String("app", r.id), zap.Error(err))
		return
	}
	rep.Applied = append(rep.Applied, applied)
	if rep.Limiter == LimiterCgroup {
		rep.Limiter = LimiterCgroup + "+" + LimiterPrlimit
	} else {
		rep.Limiter = LimiterPrlimit
	}
}

// oomCause is what an OOM kill of an app with lim is put down to.
func oomCause(lim policy.ResourceLimits) string {
	if lim.MemoryMax != 0 {
		return "memory_max " + lim.MemoryMax.String()
	}
	return "the system ran out of memory"
}

// removeLeaf kills what is left in a process's leaf, waits for it to
// empty and removes it; a leaf that does not empty is logged and left
// for the next daemon start.
func (r *runner) removeLeaf(leaf *processLeaf) {
	if leaf == nil {
		return
	}
	if err := leaf.killAll(); err != nil {
		leaf.close()
		r.s.log.Warn("app's cgroup stays", zap.String("app", r.id), zap.Error(err))
		return
	}
	r.emptied(leaf)
	r.tidy()
}

// emptied waits until a killed leaf is empty (at most cgroupDrain) and
// leaves it to tidy. A leaf that does not empty is logged and left, its
// processes still dying, for the next daemon start to clear.
func (r *runner) emptied(leaf *processLeaf) {
	if err := leaf.awaitEmpty(cgroupDrain); err != nil {
		leaf.close()
		r.s.log.Warn("app's cgroup stays", zap.String("app", r.id), zap.Error(err))
		return
	}
	r.tidy() // a leaf a caller left: never expected
	r.litter = leaf
}

// tidy removes the leaf emptied last. Nothing of the app is left in it,
// so its removal need not delay the state change that says the process
// ended: callers publish that first and tidy after.
func (r *runner) tidy() {
	leaf := r.litter
	if leaf == nil {
		return
	}
	r.litter = nil
	if err := leaf.remove(); err != nil {
		r.s.log.Warn("app's cgroup stays", zap.String("app", r.id), zap.Error(err))
	}
}

// collect finishes a process that has exited: it kills what is left of
// its group and leaf, reaps it, waits until its leaf is empty and its
// output read, and tells Links. Once it returns, nothing of the process
// is left running, its output is in the log and its link is gone: the
// caller publishes its end, then calls tidy, which removes the leaf.
func (r *runner) collect() Exit {
	s, p := r.s, r.proc
	// What remains of the app dies with its leader: the leader, a zombie
	// until reaped, still holds the group and session id, so the kill
	// cannot reach anyone else.
	r.awaitRest()
	r.killRest()
	exit, err := reap(p.pidfd, s.cfg.Now())
	if err != nil {
		s.log.Error("lost an app's exit status", zap.String("app", r.id), zap.Int("pid", p.pid), zap.Error(err))
	}
	p.pidfd.Close()
	// Out of the books once reaped, not before: the stray reaper leaves
	// what is in them to its runner.
	s.mu.Lock()
	delete(s.pids, p.pid)
	r.leafPath = ""
	s.mu.Unlock()
	// The leaf was killed with the group: once it is empty, nothing of the
	// app is left, wherever its descendants went. The leader's exit left
	// it so unless a descendant is still dying: one read, as a rule.
	if p.leaf != nil {
		if s.tasks != nil {
			s.tasks.remove(p.leaf.path)
		}
		r.emptied(p.leaf)
		// Final now that nothing of the app is left: a kill that reached
		// a child the app outlived counts too.
		if s.cgroups.controllers["memory"] && oomKills(p.leaf.path) > 0 {
			exit.OOM = oomCause(p.limits)
		}
	}
	if r.killTimer != nil {
		r.killTimer.Stop()
		r.killTimer = nil
	}
	drain := time.NewTimer(ioDrain)
	select {
	case <-p.ioDone:
	case <-drain.C:
		s.log.Warn("app's output is still held open after it exited (a descendant left its process group?); closing it",
			zap.String("app", r.id))
		for _, f := range p.outputs {
			_ = f.SetReadDeadline(time.Now())
		}
		<-p.ioDone
	}
	drain.Stop()
	if p.attached && s.cfg.Links != nil {
		r.hook("Detach", func() { s.cfg.Links.Detach(r.id) })
	}
	r.proc = nil
	return exit
}

// onExit handles the end of the app's process. The new state is
// published as soon as collect is done; the leaf's removal and the
// daemon's log line come after, and a Stop is answered once all is done.
func (r *runner) onExit() {
	s := r.s
	ran := s.cfg.Now().Sub(r.proc.started)
	exit := r.collect()
	if r.stopRequested {
		r.stopRequested = false
		st := r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, "" })
		r.afterPublish()
		s.log.Info("app stopped", zap.String("app", r.id), zap.Stringer("exit", exit))
		r.replyAll(&r.stopWaiters, cmdResult{status: st})
		if len(r.startWaiters) > 0 && r.leaving == nil {
			st, err := r.start(false)
			r.replyAll(&r.startWaiters, cmdResult{status: st, err: err})
		}
		return
	}
	d := r.policy.Exited(exit, ran, s.cfg.Now())
	switch {
	case d.fail:
		r.move(Failed, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, d.reason })
		r.afterPublish()
		s.log.Error("app gave up", zap.String("app", r.id), zap.Stringer("exit", exit), zap.String("reason", d.reason))
	case d.restart:
		r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, d.reason })
		r.backoff = time.NewTimer(d.delay)
		r.afterPublish()
		s.log.Warn("app exited", zap.String("app", r.id), zap.Stringer("exit", exit), zap.Duration("restart_in", d.delay))
	default:
		reason := ""
		if exit.OOM != "" {
			reason = exit.String() // what a person must know of this exit
		}
		r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, reason })
		r.afterPublish()
		lvl := zap.InfoLevel
		if !exit.Clean() {
			lvl = zap.WarnLevel
		}
		s.log.Log(lvl, "app exited", zap.String("app", r.id), zap.Stringer("exit", exit))
	}
}

// afterPublish follows the state change that ends a process. It first
// yields: the subscribers the change woke (the control socket's
// forwarder among them) were made runnable on this goroutine's
// processor, and would otherwise wait until this goroutine blocks, or
// until another processor steals them, while it tidies and logs. That
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
	st, dropped, err := r.moveLocked(to, edit)
	s.mu.Unlock()
	r.moved(dropped, err)
	return st
}

// moveLocked is move with s.mu held. What it owes the log (a refused
// move, the subscribers the publish dropped) goes to moved, which the
// caller calls once it let go of the lock.
func (r *runner) moveLocked(to State, edit func(*AppStatus)) (st AppStatus, dropped int, err error) {
	s := r.s
	if err := checkMove(r.status.State, to); err != nil {
		return r.status, 0, err
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
	// Published under s.mu so that subscribers see the states in the
	// order Status does.
	return st, s.subs.publish(Event{Kind: KindState, State: &st}), nil
}

// moved logs what a moveLocked owes, with s.mu released.
func (r *runner) moved(dropped int, err error) {
	if err != nil {
		r.s.log.DPanic("refused state change", zap.String("app", r.id), zap.Error(err))
	}
	r.s.logDropped(dropped)
}
