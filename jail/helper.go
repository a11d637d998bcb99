package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// HelperArg is argv[1] of the daemon's own binary re-executed as the jail
// helper. Nothing else is on argv (other processes can read a command
// line): the spec comes on an inherited descriptor.
const HelperArg = "__octosup_jail_helper"

// The helper's descriptors besides 0–3: the status pipe it reports on
// (close-on-exec, so that EOF after a report means the exec succeeded)
// and the spec, in a memfd.
const (
	statusFD = 4
	specFD   = 5
)

// maxSpec bounds what the helper reads: a spec is a few KiB.
const maxSpec = 1 << 20

// helperExit is the helper's exit code when it could not run the app; the
// reason is on the status pipe.
const helperExit = 127

// IsHelper reports whether args (os.Args) ask for the helper mode. main
// calls it before anything else and, if so, RunHelper.
func IsHelper(args []string) bool { return len(args) == 2 && args[1] == HelperArg }

// RunHelper is the helper's whole life: it reads the spec, restricts the
// thread that will exec and execs the app's program. It returns only on
// failure, with the exit code, after reporting the failing layer.
func RunHelper() int {
	// Never unlocked: every restriction below is this thread's, and this
	// thread becomes the app at execve; the runtime's other threads vanish.
	runtime.LockOSThread()
	// Close-on-exec first, so that nothing below can leak it into the app.
	if _, err := unix.FcntlInt(statusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return helperExit // no status pipe: the daemon sees EOF without a report
	}
	rep, lerr := restrict()
	if lerr != nil {
		writeStatus(statusMsg{Failure: lerr})
		return helperExit
	}
	writeStatus(statusMsg{Report: &rep.report})
	err := syscall.Exec(rep.spec.Program, rep.spec.Argv, rep.spec.Env)
	writeStatus(statusMsg{Failure: layerErr("exec", rep.spec.Program, err)})
	return helperExit
}

type restricted struct {
	spec   Spec
	report Report
}

// restrict applies the jail to the calling thread in the order of SPEC §2
// and says what took.
func restrict() (restricted, *LayerError) {
	spec, err := readSpec()
	if err != nil {
		return restricted{}, layerErr("spec", err.Error(), err)
	}
	rep := Report{Layers: []string{"env"}, Missing: []string{}}

	// fds: mark all but 0–3 close-on-exec rather than closing them: the Go
	// runtime may hold some (its poller), and exec drops them all the same.
	if err := cloexecFrom(statusFD); err != nil {
		return restricted{}, layerErr("fds", "close", err)
	}
	for fd := 0; fd <= HubFD; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return restricted{}, layerErr("fds", fmt.Sprintf("fd %d", fd), err)
		}
	}
	rep.Layers = append(rep.Layers, "fds")

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return restricted{}, layerErr("no_new_privs", "prctl", err)
	}
	rep.Layers = append(rep.Layers, "no_new_privs")
	// The fork already set it; set it again on this thread and then check
	// the daemon did not die before it took (the race the signal alone
	// cannot close: we would have been re-parented already).
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return restricted{}, layerErr("pdeathsig", "prctl", err)
	}
	if ppid := unix.Getppid(); ppid != spec.ParentPID {
		return restricted{}, &LayerError{Layer: "pdeathsig", Message: fmt.Sprintf("daemon (pid %d) is gone, parent is %d", spec.ParentPID, ppid)}
	}
	if err := dropCaps(); err != nil {
		return restricted{}, layerErr("caps", err.Error(), err)
	}
	rep.Layers = append(rep.Layers, "caps")
	if err := unix.Chdir(spec.Dir); err != nil {
		return restricted{}, layerErr("dir", "chdir "+spec.Dir, err)
	}

	abi := LandlockABI()
	rep.LandlockABI = abi
	missing := landlockMissing(spec.Landlock, abi)
	if spec.Strict && abi < spec.Landlock.MinABI {
		return restricted{}, &LayerError{Layer: "jail", Message: fmt.Sprintf("landlock ABI %d < %d", abi, spec.Landlock.MinABI)}
	}
	filter, err := buildFilter(spec.Seccomp)
	if err != nil {
		return restricted{}, layerErr("seccomp", err.Error(), err)
	}
	defer filter.Release()

	took, lerr := applyLandlock(spec.Landlock, abi)
	if lerr != nil {
		return restricted{}, lerr
	}
	if took {
		rep.Layers = append(rep.Layers, "landlock")
	} else {
		rep.LandlockABI = 0
		if len(missing) == 0 && (spec.Landlock.FS || spec.Landlock.Net || spec.Landlock.Scope) {
			missing = []string{"landlock"}
		}
	}
	rep.Missing = append(rep.Missing, missing...)

	// Last, so that nothing the helper still does is filtered. What
	// matters is this thread, which execs; libseccomp-golang also sets
	// TSYNC, which covers the runtime's other threads until they vanish.
	if err := filter.Load(); err != nil {
		switch {
		case !seccompAbsent():
			return restricted{}, layerErr("seccomp", "load: "+err.Error(), err)
		case spec.Strict:
			return restricted{}, &LayerError{Layer: "jail", Message: "no seccomp filters in this kernel"}
		}
		rep.Missing = append(rep.Missing, "seccomp")
	} else {
		rep.Layers = append(rep.Layers, "seccomp")
	}
	return restricted{spec: spec, report: rep}, nil
}

// seccompAbsent tells a kernel without seccomp filters from a filter the
// kernel refused.
func seccompAbsent() bool {
	return unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0) == unix.EINVAL
}

func readSpec() (Spec, error) {
	buf := make([]byte, 0, 16<<10)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxSpec {
				return Spec{}, fmt.Errorf("spec larger than %d bytes", maxSpec)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(specFD, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Spec{}, fmt.Errorf("read spec: %w", err)
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	unix.Close(specFD)
	return DecodeSpec(buf)
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

// statusMsg is one line on the status pipe.
type statusMsg struct {
	Report  *Report     `json:"report,omitempty"`
	Failure *LayerError `json:"failure,omitempty"`
}

func writeStatus(m statusMsg) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	b = append(b, '\n')
	for len(b) > 0 {
		n, err := unix.Write(statusFD, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		b = b[n:]
	}
}

// LayerError says which jail layer failed and why: it is what status shows
// after "failed: ", e.g. "landlock: restrict: EINVAL".
type LayerError struct {
	Layer   string `json:"layer"`
	Message string `json:"message"`
	Errno   string `json:"errno,omitempty"`
	// Code is the errno's number, for Unwrap.
	Code int `json:"code,omitempty"`
}

func (e *LayerError) Error() string {
	s := e.Layer + ": " + e.Message
	if e.Errno != "" {
		s += ": " + e.Errno
	}
	return s
}

// Unwrap gives the errno, when there is one, for errors.Is.
func (e *LayerError) Unwrap() error {
	if e.Code == 0 {
		return nil
	}
	return syscall.Errno(e.Code)
}

// layerErr is the LayerError for err, which may hold an errno.
func layerErr(layer, msg string, err error) *LayerError {
	le := &LayerError{Layer: layer, Message: msg}
	var e unix.Errno
	if errors.As(err, &e) {
		le.Errno = errnoOf(e)
		le.Code = int(e)
	} else if err != nil && msg == "" {
		le.Message = err.Error()
	}
	return le
}
