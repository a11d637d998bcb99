package jail

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
)

// The direct path (Config.DirectSpawn) starts a processes: true app
// without the helper: a goroutine locked to a fresh OS thread restricts
// that thread alone (no_new_privs, capabilities, Landlock and seccomp are
// all per thread), forks the app, which inherits all of it, and stays
// parked until the app exits, because a child's parent-death signal fires
// when the thread that forked it exits. The goroutine never unlocks its
// thread, so the runtime discards the thread when the goroutine ends and
// no other goroutine ever runs restricted.
//
// What the helper does after the fork happens here before it: the ruleset
// is built and the filter compiled on the caller's thread (nothing is
// opened on the restricted one), and the daemon's descriptors are checked
// for any that would leak into the app (no close-on-exec), in which case
// the helper, which sweeps them, takes the app instead.
//
// processes: false apps always take the helper: refusing fork to the app
// needs a filter the forking thread itself could not live under.

// onSpareThread runs f on a goroutine locked, for good, to an OS thread
// other than the main one: the runtime discards a thread whose goroutine
// ends locked, but it cannot discard the main thread, which would stay
// restricted.
func onSpareThread(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f() // never unlocked
			return
		}
		// On the main thread. Start f elsewhere while this goroutine holds
		// the main thread (so f cannot land on it), then let go of it:
		// nothing was restricted here.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			f() // never unlocked
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// leakyFDs lists the daemon's descriptors above 2 that lack close-on-exec
// and so would reach a directly spawned app.
func leakyFDs() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	dirFD := int(d.Fd())
	d.Close()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 || fd == dirFD {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		out = append(out, fd)
	}
	return out, nil
}

// directable reports whether spec can take the direct path.
func directable(spec Spec) bool {
	for _, r := range spec.Seccomp {
		if r.Name == "fork" || r.Name == "vfork" {
			return false
		}
	}
	return true
}

type directResult struct {
	pid, pidfd int
	report     Report
	err        error
}

// startDirect starts spec's program from a fresh, restricted thread. ok is
// false when it declined (leaky descriptors) without starting anything.
func (l *Launcher) startDirect(spec Spec, stdout, stderr, hub *os.File) (p *Process, ok bool, err error) {
	if leaks, err := leakyFDs(); err != nil || len(leaks) > 0 {
		l.log.Sugar().Infof("jail %s: helper instead of direct spawn: descriptors %v lack close-on-exec (%v)", spec.App, leaks, err)
		return nil, false, nil
	}
	prog, err := l.filters.get(spec.Seccomp)
	if err != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, layerErr("seccomp", err.Error(), err))
	}
	abi := helper.LandlockABI()
	if spec.Strict && abi < spec.Landlock.MinABI {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, &LayerError{Layer: "jail", Message: fmt.Sprintf("landlock ABI %d < %d", abi, spec.Landlock.MinABI)})
	}
	// /proc/self here would be the daemon's own entry: the app's pid is
	// not known before the fork, so a directly spawned app gets no /proc.
	ls := spec.Landlock
	ls.Paths = slices.DeleteFunc(slices.Clone(ls.Paths), func(p PathRule) bool { return p.Why == "proc" })
	rulesetFD, llFlags, lerr := helper.BuildRuleset(ls, abi)
	if lerr != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, lerr)
	}
	if rulesetFD >= 0 {
		defer unix.Close(rulesetFD)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, err)
	}
	defer devnull.Close()
	if stdout == nil {
		stdout = devnull
	}
	if stderr == nil {
		stderr = devnull
	}
	rep := Report{LandlockABI: abi, Layers: []string{"env", "fds", "no_new_privs", "caps"}, Missing: helper.LandlockMissing(spec.Landlock, abi)}
	if rep.Missing == nil {
		rep.Missing = []string{}
	}

	res := make(chan directResult, 1)
	onSpareThread(func() {
		// From here on this thread is restricted; it ends with this
		// goroutine.
		r := directSpawn(spec, rep, rulesetFD, llFlags, prog, []uintptr{devnull.Fd(), stdout.Fd(), stderr.Fd(), hub.Fd()})
		if r.err != nil {
			res <- r
			return
		}
		// A duplicate to park on: the caller owns, waits on and closes
		// the pidfd it gets.
		park, err := unix.FcntlInt(uintptr(r.pidfd), unix.F_DUPFD_CLOEXEC, 0)
		res <- r
		if err != nil {
			// No descriptor left: wait without reaping (the caller reaps)
			// by pid instead.
			var info unix.Siginfo
			for unix.Waitid(unix.P_PID, r.pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
			}
			return
		}
		defer unix.Close(park)
		fds := []unix.PollFd{{Fd: int32(park), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	})
	r := <-res
	if r.err != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, r.err)
	}
	return &Process{Pid: r.pid, Pidfd: r.pidfd, app: spec.App, log: l.log, report: r.report, direct: true}, true, nil
}

// directSpawn runs on the locked thread: restrict it, then fork the app.
func directSpawn(spec Spec, rep Report, rulesetFD int, llFlags uint32, prog []unix.SockFilter, files []uintptr) directResult {
	fail := func(lerr *LayerError) directResult { return directResult{err: lerr} }
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(layerErr("no_new_privs", "prctl", err))
	}
	if err := helper.DropCaps(); err != nil {
		return fail(layerErr("caps", err.Error(), err))
	}
	if rulesetFD >= 0 {
		if lerr := helper.RestrictSelf(rulesetFD, llFlags); lerr != nil {
			return fail(lerr)
		}
		rep.Layers = append(rep.Layers, "landlock")
	} else {
		rep.LandlockABI = 0
		if len(rep.Missing) == 0 && (spec.Landlock.FS || spec.Landlock.Net || spec.Landlock.Scope) {
			rep.Missing = []string{"landlock"}
		}
	}
	if err := helper.LoadFilter(prog); err != nil {
		switch {
		case !helper.SeccompAbsent():
			return fail(layerErr("seccomp", "load", err))
		case spec.Strict:
			return fail(&LayerError{Layer: "jail", Message: "no seccomp filters in this kernel"})
		}
		rep.Missing = append(rep.Missing, "seccomp")
	} else {
		rep.Layers = append(rep.Layers, "seccomp")
	}
	pidfd := -1
	pid, err := syscall.ForkExec(spec.Program, spec.Argv, &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	})
	if err != nil {
		return fail(layerErr("exec", spec.Program, err))
	}
	return directResult{pid: pid, pidfd: pidfd, report: rep}
}
