package supervisor

import (
	"errors"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/policy"
)

// An app's stop and its process's end, on its runner's goroutine: the
// signals, the grace, the kill step, the leaf's removal, the exit's
// collection and what the restart policy makes of it.

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
// leaf; none of these for a contained app, whose leaf is all of it), and
// its cgroup leaf: each process in cgroup.procs through a pidfd, and
// for SIGKILL cgroup.kill first. Only the run goroutine calls it, and
// only while the leader is unreaped: its pid is the group's and the
// session's id, which no other process can have meanwhile.
func (r *runner) signal(sig unix.Signal) {
	p := r.proc
	r.signalKnown(sig)
	if p.contained {
		return
	}
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
		// cgroup.kill signals each process's leader thread, and passes by
		// one whose leader has exited while its other threads run on:
		// those get the kill through a pidfd, as every other signal.
		err = errors.Join(err, signalLeaf(p.leaf.path, sig))
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
	if p.contained {
		return // the leaf is killed: emptied waits for it
	}
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
	// A stray's zombie may wait behind the leader's (reapStrays).
	s.kickReaper()
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
