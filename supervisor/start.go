package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/jail"
	"octosup/policy"
)

// An app's start, on its runner's goroutine: the leaf and its limits,
// the fork on the spawner thread, the wait for the jail's report while
// the app's commands are still served, and running or failed.

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
	a.neighbours = s.entries // shared, only read
	r.procGen++
	r.procEntry, r.procDev, r.procEntries = a.entry, a.dev, s.entries
	_, moveErr := r.moveLocked(Starting, func(st *AppStatus) {
		st.Pid, st.Restarts, st.Reason, st.Jail, st.Stopper, st.Stale, st.Limits = 0, a.restarts, "", nil, s.stopper(), nil, nil
	})
	s.mu.Unlock()
	r.moved(moveErr)
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
	// Until the process is in s.pids or gone, CheckCaller does not place a
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
				s.log.Info("manifest change waits for the start under way", zap.String("app", r.id))
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
	p.contained = p.leaf != nil && !p.broad && slices.Contains(report.Layers, "landlock") && slices.Contains(report.Layers, "seccomp")
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
	t0 := r.s.cfg.Now()
	call()
	if d := r.s.cfg.Now().Sub(t0); d > slowHook {
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
		r.logs.add(LogLine{App: r.id, Stream: stream, Text: text}, &r.s.logSeq, r.s.cfg.Now, func(l LogLine) {
			r.s.publish(Event{Kind: KindLog, Log: &l})
		})
		r.s.log.Info("app output", zap.String("app", r.id), zap.String("stream", stream), zap.String("text", text))
	}
}
