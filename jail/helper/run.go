package helper

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Arg is argv[1] of the helper (octosup-jail, or a binary that dispatches
// to Run with IsHelper). Nothing else is on argv (other processes can
// read a command line): the input comes on an inherited descriptor.
const Arg = "__octosup_jail_helper"

// The helper's descriptors besides 0–3: the status pipe it reports on
// (close-on-exec, so that EOF after a report means the exec succeeded)
// and its Input, in a memfd.
const (
	StatusFD = 4
	InputFD  = 5
)

// Exit is the helper's exit code when it could not run the app; the
// reason is on the status pipe.
const Exit = 127

// IsHelper reports whether args (os.Args) ask for the helper.
func IsHelper(args []string) bool { return len(args) == 2 && args[1] == Arg }

// Run is the helper's whole life: it reads its Input, restricts the
// thread that will exec and execs the app's program. It returns only on
// failure, with the exit code, after reporting the failing layer.
func Run() int {
	// Never unlocked: every restriction below is this thread's, and this
	// thread becomes the app at execve; the runtime's other threads vanish.
	runtime.LockOSThread()
	// Close-on-exec first, so that nothing below can leak it into the app.
	if _, err := unix.FcntlInt(StatusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return Exit // no status pipe: the daemon sees EOF without a report
	}
	spec, ea, rep, lerr := restrict()
	if lerr != nil {
		writeStatus(statusMsg{Failure: lerr})
		return Exit
	}
	writeStatus(statusMsg{Report: &rep})
	err := ea.Exec()
	writeStatus(statusMsg{Failure: LayerErr("exec", spec.Program, err)})
	return Exit
}

// restrict applies the jail to the calling thread in the order docs/jail.md
// gives, and says what took.
func restrict() (Spec, *ExecArgs, Report, *LayerError) {
	spec, prog, err := readInput()
	if err != nil {
		return Spec{}, nil, Report{}, LayerErr("spec", err.Error(), err)
	}
	// The exec's arguments, where the exec gate expects them (never
	// freed: the exec replaces this memory).
	ea, err := NewExecArgs(spec.Program, spec.Argv, spec.Env)
	if err != nil {
		return Spec{}, nil, Report{}, LayerErr("exec", err.Error(), err)
	}
	rep, lerr := restrictAs(spec, prog, ea)
	return spec, ea, rep, lerr
}

func restrictAs(spec Spec, prog []unix.SockFilter, ea *ExecArgs) (Report, *LayerError) {
	rep := Report{Layers: []string{"env"}, Missing: []string{}}

	// fds: mark all but 0–3 close-on-exec rather than closing them: the Go
	// runtime may hold some (its poller), and exec drops them all the same.
	if err := cloexecFrom(StatusFD); err != nil {
		return Report{}, LayerErr("fds", "close", err)
	}
	for fd := 0; fd <= HubFD; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return Report{}, LayerErr("fds", fmt.Sprintf("fd %d", fd), err)
		}
	}
	rep.Layers = append(rep.Layers, "fds")

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return Report{}, LayerErr("no_new_privs", "prctl", err)
	}
	rep.Layers = append(rep.Layers, "no_new_privs")
	// The fork already set it; set it again on this thread and then check
	// the daemon did not die before it took (the race the signal alone
	// cannot close: we would have been re-parented already).
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return Report{}, LayerErr("pdeathsig", "prctl", err)
	}
	if ppid := unix.Getppid(); ppid != spec.ParentPID {
		return Report{}, &LayerError{Layer: "pdeathsig", Message: fmt.Sprintf("daemon (pid %d) is gone, parent is %d", spec.ParentPID, ppid)}
	}
	if err := DropCaps(); err != nil {
		return Report{}, LayerErr("caps", err.Error(), err)
	}
	rep.Layers = append(rep.Layers, "caps")
	if err := resetIgnoredSignals(); err != nil {
		return Report{}, LayerErr("signals", "reset ignored signals", err)
	}
	if err := unix.Chdir(spec.Dir); err != nil {
		return Report{}, LayerErr("dir", "chdir "+spec.Dir, err)
	}

	abi := LandlockABI()
	rep.LandlockABI = abi
	missing := LandlockMissing(spec.Landlock, abi)
	if spec.Strict && abi < spec.Landlock.MinABI {
		return Report{}, &LayerError{Layer: "jail", Message: fmt.Sprintf("landlock ABI %d < %d", abi, spec.Landlock.MinABI)}
	}
	took, lerr := applyLandlock(spec.Landlock, abi)
	if lerr != nil {
		return Report{}, lerr
	}
	if took {
		rep.Layers = append(rep.Layers, "landlock")
	} else {
		rep.LandlockABI = 0
		if len(missing) == 0 && (spec.Landlock.FS || spec.Landlock.WriteOnly || spec.Landlock.Net || spec.Landlock.Scope) {
			missing = []string{"landlock"}
		}
	}
	rep.Missing = append(rep.Missing, missing...)

	// Last, so that nothing the helper still does is filtered; on this
	// thread alone, the one that execs.
	if err := loadFilters(spec, prog, ea); err != nil {
		switch {
		case !SeccompAbsent():
			return Report{}, err
		case spec.Strict:
			return Report{}, &LayerError{Layer: "jail", Message: "no seccomp filters in this kernel"}
		}
		rep.Missing = append(rep.Missing, "seccomp")
	} else {
		rep.Layers = append(rep.Layers, "seccomp")
	}
	return rep, nil
}

// loadFilters loads the app's filter, behind the exec gate when the spec
// lets only its own exec through, with a listener sent to the daemon when
// the spec hands calls to it.
func loadFilters(spec Spec, prog []unix.SockFilter, ea *ExecArgs) *LayerError {
	if spec.ExecOnce {
		prog = ea.Gate(prog)
	}
	if !spec.Notifies() {
		if err := LoadFilter(prog); err != nil {
			return LayerErr("seccomp", "load", err)
		}
	} else {
		fd, err := LoadFilterListener(prog)
		if err != nil {
			return LayerErr("seccomp", "load", err)
		}
		err = SendFD(NotifyFD, fd)
		unix.Close(fd)
		if err != nil {
			return LayerErr("seccomp", "send the notify listener", err)
		}
	}
	return nil
}

func readInput() (Spec, []unix.SockFilter, error) {
	buf := make([]byte, 0, 32<<10)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxInput {
				return Spec{}, nil, fmt.Errorf("input larger than %d bytes", maxInput)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(InputFD, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Spec{}, nil, fmt.Errorf("read input: %w", err)
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	unix.Close(InputFD)
	return DecodeInput(buf)
}

// cloexecFrom marks every descriptor from lo up close-on-exec.
func cloexecFrom(lo int) error {
	err := unix.CloseRange(uint(lo), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if err != unix.ENOSYS && err != unix.EINVAL {
		return err
	}
	// Before Linux 5.11: walk the table.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	for fd := lo; uint64(fd) < min(lim.Cur, 1<<20); fd++ {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	return nil
}
