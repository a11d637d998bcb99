package supervisor

import (
	"fmt"
	"os"
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
)

func (k cmdKind) String() string {
	switch k {
	case cmdStart:
		return "start"
	case cmdStop:
		return "stop"
	case cmdRestart:
		return "restart"
	}
	return fmt.Sprintf("command(%d)", int(k))
}

type command struct {
	kind  cmdKind
	reply chan cmdResult // buffered 1: the runner never blocks on it
}

type cmdResult struct {
	status AppStatus
	err    error
}

// proc is one live process of an app.
type proc struct {
	pid      int
	pidfd    *os.File
	exited   chan struct{} // closed by watchExit
	outputs  []*os.File    // read ends, closed by their readers
	ioDone   chan struct{} // closed when both readers have returned
	started  time.Time
	attached bool // the hub went to Links
}

// runner is one app's lifecycle. Its goroutine (run) is the only place
// that starts, signals and reaps the app's processes and moves its state,
// so commands, exits and timers are handled one at a time, in order.
type runner struct {
	s       *Supervisor
	id      string
	logs    *ring
	cmds    chan command
	remove  chan struct{}   // closed by Apply when the app leaves the manifest
	done    chan struct{}   // closed when run returns
	settled chan struct{}   // closed once the first autostart attempt is over
	prev    <-chan struct{} // a previous runner of the same id still stopping

	// Guarded by s.mu: Apply edits entry, Status reads status.
	entry  policy.App
	status AppStatus

	// Owned by the run goroutine.
	policy        *restartPolicy
	starts        int
	proc          *proc
	stopRequested bool
	stopWaiters   []chan cmdResult
	startWaiters  []chan cmdResult // start once the current process is gone
	killTimer     *time.Timer
	backoff       *time.Timer
	leaving       error // ErrUnknownApp (removed) or ErrShutdown once leaving
}

func newRunner(s *Supervisor, app policy.App, prev <-chan struct{}) *runner {
	return &runner{
		s:       s,
		id:      app.ID,
		logs:    newRing(s.cfg.LogLines),
		cmds:    make(chan command),
		remove:  make(chan struct{}),
		done:    make(chan struct{}),
		settled: make(chan struct{}),
		prev:    prev,
		entry:   app,
		status:  AppStatus{ID: app.ID, State: Stopped, Since: s.cfg.Now(), Stopper: StopperProcessGroup},
		policy:  newRestartPolicy(app.Restart),
	}
}

func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

func (r *runner) run() {
	defer r.finish()
	if r.prev != nil {
		select {
		case <-r.prev:
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

	remove, quit := r.remove, r.s.quit
	for r.leaving == nil || r.proc != nil {
		var exited chan struct{}
		if r.proc != nil {
			exited = r.proc.exited
		}
		select {
		case c := <-r.cmds:
			r.handle(c)
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
		case <-remove:
			remove, quit = nil, nil
			r.leave(ErrUnknownApp)
		case <-quit:
			remove, quit = nil, nil
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
			c.reply <- cmdResult{st, err}
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
	}
}

// start launches a process for the app and waits until it runs the app's
// program or has failed. auto says the restart policy asked for it; any
// other start resets the policy's history.
func (r *runner) start(auto bool) (AppStatus, error) {
	s := r.s
	s.mu.Lock()
	entry, dev := r.entry, s.devMode
	s.mu.Unlock()
	if !auto {
		r.policy.Reset()
	}
	now := s.cfg.Now()
	r.policy.Started(now, entry.Restart)
	restarts := r.starts
	r.starts++
	r.move(Starting, func(st *AppStatus) {
		st.Pid, st.Restarts, st.Reason, st.Jail = 0, restarts, "", nil
	})

	c, err := newCaptures(r.id)
	if err != nil {
		return r.fail(nil, err.Error())
	}
	reply := make(chan spawnResult, 1)
	s.spawnReqs <- spawnRequest{
		req: jail.Request{
			App: entry, DeveloperMode: dev, Dirs: s.cfg.Dirs, BaseEnv: s.cfg.BaseEnv,
			Stdout: c.outW, Stderr: c.errW, Hub: c.hubChild,
		},
		reply: reply,
	}
	res := <-reply
	c.closeChild()
	if res.err == nil && res.proc == nil {
		res.err = fmt.Errorf("launcher returned no process and no error (a launcher bug)")
	}
	if res.err != nil {
		c.closeDaemon()
		// The launcher's errors start with "start <id>: ", as ours do.
		return r.fail(nil, strings.TrimPrefix(res.err.Error(), "start "+r.id+": "))
	}
	jp := res.proc
	if jp.Pidfd < 0 {
		// Without a pidfd the process can be neither waited for the
		// netpoller way nor signalled safely; the launcher must use
		// CLONE_PIDFD (Linux 5.3+).
		_ = unix.Kill(jp.Pid, unix.SIGKILL)
		c.closeDaemon()
		return r.fail(nil, "launcher returned no pidfd (octosup needs Linux 5.3 or later)")
	}
	if err := unix.SetNonblock(jp.Pidfd, true); err != nil {
		_ = unix.Kill(jp.Pid, unix.SIGKILL)
		c.closeDaemon()
		return r.fail(nil, fmt.Sprintf("pidfd: %v", err))
	}
	p := &proc{
		pid:     jp.Pid,
		pidfd:   os.NewFile(uintptr(jp.Pidfd), "pidfd:"+r.id),
		exited:  make(chan struct{}),
		outputs: []*os.File{c.outR, c.errR},
		ioDone:  make(chan struct{}),
		started: now,
	}
	r.proc = p
	s.mu.Lock()
	s.pids[p.pid] = r
	s.mu.Unlock()
	s.io.Add(3)
	go func() {
		defer s.io.Done()
		watchExit(p.pidfd, p.exited)
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

	// Signalling the group must never reach the daemon's own group.
	if pg, err := unix.Getpgid(p.pid); err == nil && pg != p.pid {
		_ = unix.Kill(p.pid, unix.SIGKILL)
		c.hub.Close()
		<-p.exited
		exit := r.collect()
		return r.fail(&exit, fmt.Sprintf("process is not in its own process group (pgid %d): the launcher must set Setpgid", pg))
	}
	report, err := jp.Confirm()
	if err != nil {
		r.signal(unix.SIGKILL)
		c.hub.Close()
		<-p.exited
		exit := r.collect()
		return r.fail(&exit, err.Error())
	}
	st := r.move(Running, func(st *AppStatus) { st.Pid, st.Jail = p.pid, &report })
	s.log.Info("app started", zap.String("app", r.id), zap.Int("pid", p.pid),
		zap.Strings("jail_layers", report.Layers), zap.Strings("jail_missing", report.Missing),
		zap.Int("landlock_abi", report.LandlockABI), zap.Int("restarts", restarts))
	if s.cfg.Links != nil {
		p.attached = true
		s.cfg.Links.Attach(entry, c.hub)
	} else {
		c.hub.Close()
	}
	return st, nil
}

func (r *runner) fail(exit *Exit, reason string) (AppStatus, error) {
	r.s.log.Error("app failed to start", zap.String("app", r.id), zap.String("reason", reason))
	st := r.move(Failed, func(st *AppStatus) {
		st.Pid, st.Reason = 0, reason
		if exit != nil {
			st.LastExit = exit
		}
	})
	return st, fmt.Errorf("start %s: %w: %s", r.id, ErrStartFailed, reason)
}

func (r *runner) emitter(stream string) func(string) {
	return func(text string) {
		l := LogLine{App: r.id, Stream: stream, Text: text, At: r.s.cfg.Now()}
		r.logs.add(l)
		r.s.log.Info("app output", zap.String("app", r.id), zap.String("stream", stream), zap.String("text", text))
		r.s.subs.publish(Event{Kind: "log", Log: &l})
	}
}

func (r *runner) beginStop() {
	r.stopRequested = true
	r.move(Stopping, func(*AppStatus) {})
	r.signal(unix.SIGTERM)
	r.killTimer = time.NewTimer(r.s.cfg.StopGrace)
}

// signal sends sig to the app's process group. Only the run goroutine
// calls it, and only while the leader is unreaped.
func (r *runner) signal(sig unix.Signal) {
	if err := killGroup(r.proc.pid, sig); err != nil {
		r.s.log.Error("cannot signal app", zap.String("app", r.id), zap.Error(err))
	}
}

// collect finishes a process that has exited: it kills what is left of
// its group, reaps it, waits for its output and tells Links.
func (r *runner) collect() Exit {
	s, p := r.s, r.proc
	// What remains of the group dies with its leader: the leader, a
	// zombie until reaped, still holds the group id, so the kill cannot
	// reach anyone else.
	r.signal(unix.SIGKILL)
	s.mu.Lock()
	delete(s.pids, p.pid)
	s.mu.Unlock()
	exit, err := reap(p.pidfd, s.cfg.Now())
	if err != nil {
		s.log.Error("lost an app's exit status", zap.String("app", r.id), zap.Int("pid", p.pid), zap.Error(err))
	}
	p.pidfd.Close()
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
		s.cfg.Links.Detach(r.id)
	}
	r.proc = nil
	return exit
}

func (r *runner) onExit() {
	s := r.s
	ran := s.cfg.Now().Sub(r.proc.started)
	exit := r.collect()
	if r.stopRequested {
		r.stopRequested = false
		st := r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, "" })
		s.log.Info("app stopped", zap.String("app", r.id), zap.Stringer("exit", exit))
		r.replyAll(&r.stopWaiters, cmdResult{status: st})
		if len(r.startWaiters) > 0 && r.leaving == nil {
			st, err := r.start(false)
			r.replyAll(&r.startWaiters, cmdResult{st, err})
		}
		return
	}
	d := r.policy.Exited(exit, ran, s.cfg.Now())
	switch {
	case d.fail:
		s.log.Error("app gave up", zap.String("app", r.id), zap.String("reason", d.reason))
		r.move(Failed, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, d.reason })
	case d.restart:
		s.log.Warn("app exited", zap.String("app", r.id), zap.Stringer("exit", exit), zap.Duration("restart_in", d.delay))
		r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, d.reason })
		r.backoff = time.NewTimer(d.delay)
	default:
		lvl := zap.InfoLevel
		if !exit.Clean() {
			lvl = zap.WarnLevel
		}
		s.log.Log(lvl, "app exited", zap.String("app", r.id), zap.Stringer("exit", exit))
		r.move(Stopped, func(st *AppStatus) { st.Pid, st.LastExit, st.Reason = 0, &exit, "" })
	}
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
	defer s.mu.Unlock()
	if err := checkMove(r.status.State, to); err != nil {
		s.log.DPanic("refused state change", zap.String("app", r.id), zap.Error(err))
		return r.status
	}
	r.status.State = to
	r.status.Since = s.cfg.Now()
	edit(&r.status)
	st := r.status
	s.subs.publish(Event{Kind: "state", State: &st})
	return st
}
