package jail

import (
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/spawn"
)

// The in-process spawn, every app's launcher where the kernel and the
// architecture allow it (SpawnsInProcess): the daemon prepares the jail
// (prepare.go), then jail/spawn forks with clone3(CLONE_VM|CLONE_VFORK)
// from the calling thread, the spawner thread, and the child runs the
// setup sequence on itself with raw syscalls before its one execve: the
// helper's sequence, the same C code, without the helper's exec
// (docs/jail.md has the costs).
//
// Why this is sound where restricting a thread of the daemon would not be:
// the child is a process of its own with one thread, so Landlock's and
// seccomp's per-thread enforcement covers all of it, and nothing of the
// daemon is ever restricted. It shares the daemon's memory until execve
// (vfork), which is why the sequence makes only raw syscalls, on a stack
// of its own, with every signal blocked until CLONE_CLEAR_SIGHAND has
// reset the daemon's handlers; the forking thread sleeps until the child
// execs or exits, so the child's failure is known when Start returns.

// stepError names the sequence's steps (spawn.Step) as LayerErrors do.
var stepError = map[spawn.Step]struct{ layer, msg string }{
	spawn.StepSigmask:          {"signals", "sigprocmask"},
	spawn.StepFDs:              {"fds", "set up 0-3"},
	spawn.StepSetsid:           {"setsid", "setsid"},
	spawn.StepNoNewPrivs:       {"no_new_privs", "prctl"},
	spawn.StepPdeathsig:        {"pdeathsig", "prctl"},
	spawn.StepParentGone:       {"pdeathsig", "the daemon is gone"},
	spawn.StepCaps:             {"caps", "capset"},
	spawn.StepDir:              {"dir", "chdir"},
	spawn.StepLandlockProc:     {"landlock", "add /proc/self"},
	spawn.StepLandlockRestrict: {"landlock", "restrict"},
	spawn.StepSeccomp:          {"seccomp", "load"},
	spawn.StepNotify:           {"seccomp", "send the notify listener"},
	spawn.StepExec:             {"exec", ""},
	spawn.StepNoExec:           {"", "the process died before it reached execve"},
	spawn.StepInputRead:        {"spec", "read the helper's input"},
	spawn.StepInputBad:         {"spec", "invalid jail spec: not a jail helper input of this build (a daemon and a helper of different builds?)"},
	spawn.StepExecArgs:         {"exec", "map the exec's arguments"},
	spawn.StepNoCgo:            {"spec", "the jail helper was built without cgo and has no setup sequence: build it with cgo (make build)"},
}

// SpawnsInProcess reports whether apps may take the in-process spawn
// here; where not, every app takes the helper. It probes what the
// in-process launcher needs beyond clone3 (which a start finds out, and
// then sends that app and every later one to the helper): x86-64, and
// close_range with CLOSE_RANGE_CLOEXEC (Linux 5.11). A range past any
// descriptor closes nothing and fails only on a kernel without the call
// or the flag.
func SpawnsInProcess() bool {
	if runtime.GOARCH != "amd64" {
		return false
	}
	return unix.CloseRange(math.MaxInt32, math.MaxInt32, unix.CLOSE_RANGE_CLOEXEC) == nil
}

// startFork starts spec's program jailed by a child of the calling
// thread (see above). ok is false when this kernel has no clone3 with the
// flags it needs: nothing was started, and the helper must take it.
func (l *Launcher) startFork(spec Spec, stdout, stderr, hub *os.File, cgroupFD int) (p *Process, ok bool, err error) {
	prep, err := l.prepare(spec, stdout, stderr, hub)
	if err != nil {
		return nil, true, err
	}
	defer prep.close()
	var fds [4]int
	for i, f := range prep.files {
		fds[i] = int(f.Fd())
	}
	in := prep.input(l, fds, prep.rulesetFD, prep.notifyW, false)
	defer in.Free()
	child, errno := spawn.Fork(in, max(cgroupFD, -1))
	// The descriptors were read by the child, which has its own table by
	// now (it exec'd or exited).
	runtime.KeepAlive(prep.files)
	if errno != 0 {
		return l.forkRefused(spec, child, errno, cgroupFD)
	}
	p = &Process{Pid: child.Pid, Pidfd: child.Pidfd, app: spec.App, log: l.log, forked: true, report: prep.rep, notifySock: -1}
	if child.Status.Step != spawn.StepOK {
		p.report = Report{}
		p.err = stepFailure(spec, child.Status)
		return p, true, nil
	}
	if prep.notifyR >= 0 {
		// The child sent it before its execve, which is done by now;
		// takeGuard closes the socket, prep.close must not again.
		p.takeGuard(prep.takeNotifyR(), l.guardFor(spec))
	}
	return p, true, nil
}

// forkRefused is startFork's answer when nothing was forked: the helper
// takes every start from now on when clone3 is missing or refused.
func (l *Launcher) forkRefused(spec Spec, child spawn.Forked, errno unix.Errno, cgroupFD int) (*Process, bool, error) {
	if child.Status.Step == spawn.StepStack {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, layerErr("fork", "the child's stack", errno))
	}
	if errno == unix.ENOSYS || errno == unix.EPERM && cgroupFD <= 0 {
		// No clone3 here, or a seccomp policy around the daemon (a
		// container's, systemd's SystemCallFilter=) refusing it; Go's
		// fork of the helper uses clone(2), which such policies allow.
		// Into a cgroup that, too, needs clone3.
		l.noFork.Store(true)
		l.log.Sugar().Warnf("jail: starting apps through the helper: clone3 for the in-process spawn: %v", errno)
		return nil, false, nil
	}
	return nil, true, fmt.Errorf("start %s: %w", spec.App, layerErr("fork", "clone3", errno))
}

// ignoredSignals is the set of signals the daemon ignores, bit n-1 for
// signal n, which the sequence resets to their default: what the kernel
// said was ignored at the first start (an inherited SIG_IGN the Go
// runtime leaves alone, such as a tmux pane's SIGTTIN and SIGTTOU, which
// signal.Ignored does not report) and what this process ignores through
// os/signal now. A helper inherits the same set (exec keeps what is
// ignored). Resetting one more than needed is harmless: the handlers are
// all default already (CLONE_CLEAR_SIGHAND, or the helper's exec).
func (l *Launcher) ignoredSignals() uint64 {
	set := l.inheritedIgnored()
	for n := 1; n <= 64; n++ {
		if signal.Ignored(syscall.Signal(n)) {
			set |= 1 << (n - 1)
		}
	}
	return set
}

// kernelIgnored asks the kernel which signals this process ignores.
func kernelIgnored() uint64 {
	var set uint64
	for n := 1; n <= 64; n++ {
		if helper.SignalIgnored(n) {
			set |= 1 << (n - 1)
		}
	}
	return set
}

// execArgs lays out the exec's arguments for the exec gate: in the
// Launcher's arena (made at the first start), or in mappings of their
// own when they do not fit it.
func (l *Launcher) execArgs(spec Spec) (*helper.ExecArgs, error) {
	a, err := l.arena()
	if err != nil {
		return nil, err
	}
	ea, ok, err := a.Place(spec.Program, spec.Argv, spec.Env)
	if err != nil || ok {
		return ea, err
	}
	return helper.NewExecArgs(spec.Program, spec.Argv, spec.Env)
}

// stepFailure is the LayerError of the step the sequence failed at, or
// ErrHelperDied for a process killed before it reached execve.
func stepFailure(spec Spec, st spawn.Status) error {
	e, ok := stepError[st.Step]
	if !ok {
		return fmt.Errorf("jail: the setup sequence failed at unknown step %d (errno %d): a bug", st.Step, st.Errno)
	}
	switch st.Step {
	case spawn.StepParentGone:
		return &LayerError{Layer: e.layer, Message: fmt.Sprintf("daemon (pid %d) is gone", spec.ParentPID)}
	case spawn.StepDir:
		return layerErr(e.layer, "chdir "+spec.Dir, st.Errno)
	case spawn.StepExec:
		return layerErr(e.layer, spec.Program, st.Errno)
	case spawn.StepNoExec:
		// Killed (the exit the caller reaps names the signal): it is the
		// helper dying without a word, on this path.
		return fmt.Errorf("%w: %s", ErrHelperDied, e.msg)
	case spawn.StepInputBad, spawn.StepNoCgo:
		return &LayerError{Layer: e.layer, Message: e.msg}
	}
	return layerErr(e.layer, e.msg, st.Errno)
}
