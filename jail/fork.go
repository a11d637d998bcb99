package jail

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
)

// The in-process spawn, every app's path where the kernel and the
// architecture allow it (SpawnsInProcess): the daemon prepares everything
// the jail needs (the spec, the seccomp program, the Landlock ruleset,
// all in C memory), then spawn.c forks with clone3(CLONE_VM|CLONE_VFORK)
// from the calling thread, the spawner thread, and the child applies the
// jail to itself with raw syscalls before its one execve: the helper's
// work, in the helper's order, without the helper's exec and Go runtime
// start (docs/jail.md has the costs).
//
// Why this is sound where restricting a thread of the daemon would not be:
// the child is a process of its own with one thread, so Landlock's and
// seccomp's per-thread enforcement covers all of it, and nothing of the
// daemon is ever restricted. It shares the daemon's memory until execve
// (vfork), which is why spawn.c makes only raw syscalls, on a stack of its
// own, with every signal blocked until CLONE_CLEAR_SIGHAND has reset the
// daemon's handlers; the forking thread sleeps until the child execs or
// exits, so the child's failure is known when Start returns.

// ocsStep names spawn.h's steps, in its order, as the helper names its
// layers in a LayerError.
var ocsStep = [...]struct{ layer, msg string }{
	C.OCS_OK:                {"", ""},
	C.OCS_SIGMASK:           {"signals", "sigprocmask"},
	C.OCS_FDS:               {"fds", "set up 0-3"},
	C.OCS_SETPGID:           {"setpgid", "setpgid"},
	C.OCS_NO_NEW_PRIVS:      {"no_new_privs", "prctl"},
	C.OCS_PDEATHSIG:         {"pdeathsig", "prctl"},
	C.OCS_PARENT_GONE:       {"pdeathsig", "the daemon is gone"},
	C.OCS_CAPS:              {"caps", "capset"},
	C.OCS_DIR:               {"dir", "chdir"},
	C.OCS_LANDLOCK_PROC:     {"landlock", "add /proc/self"},
	C.OCS_LANDLOCK_RESTRICT: {"landlock", "restrict"},
	C.OCS_SECCOMP:           {"seccomp", "load"},
	C.OCS_NOTIFY:            {"seccomp", "send the notify listener"},
	C.OCS_EXEC:              {"exec", ""},
	C.OCS_NO_EXEC:           {"", "the process died before it reached execve"},
}

// landlockABI1FS is every filesystem right of Landlock ABI 1: the rights
// the child's /proc/self rule may carry on any kernel with Landlock (the
// rule is read-only; a right past ABI 1 given to it would be dropped
// here, on this path only).
const landlockABI1FS = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
	ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
	ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym

// SpawnsInProcess reports whether apps may take the in-process spawn
// here; where not, every app takes the helper. It probes what spawn.c
// needs beyond clone3 (which a start finds out, and then sends that app
// and every later one to the helper): x86-64, and close_range with
// CLOSE_RANGE_CLOEXEC (Linux 5.11). A range past any descriptor closes
// nothing and fails only on a kernel without the call or the flag.
func SpawnsInProcess() bool {
	if runtime.GOARCH != "amd64" {
		return false
	}
	return unix.CloseRange(math.MaxInt32, math.MaxInt32, unix.CLOSE_RANGE_CLOEXEC) == nil
}

// cMem is the C memory one fork reads; free releases it all.
type cMem []unsafe.Pointer

func (m *cMem) str(s string) *C.char {
	p := C.CString(s)
	*m = append(*m, unsafe.Pointer(p))
	return p
}

func (m *cMem) filter(prog []unix.SockFilter) *C.struct_ocs_filter {
	if len(prog) == 0 {
		return nil
	}
	// C.malloc, unlike C.calloc, never returns nil (cgo aborts instead).
	raw := C.malloc(C.size_t(len(prog)) * C.size_t(unsafe.Sizeof(C.struct_ocs_filter{})))
	p := (*[helper.MaxFilter]C.struct_ocs_filter)(raw)[:len(prog):len(prog)]
	*m = append(*m, raw)
	for i, in := range prog {
		p[i] = C.struct_ocs_filter{code: C.uint16_t(in.Code), jt: C.uint8_t(in.Jt), jf: C.uint8_t(in.Jf), k: C.uint32_t(in.K)}
	}
	return &p[0]
}

func (m *cMem) free() {
	for _, p := range *m {
		C.free(p)
	}
	*m = nil
}

// startFork starts spec's program jailed by a child of the calling
// thread (see above). A jail that cannot be set up fails with the bare
// *LayerError, as the helper's Confirm does, so that status reads
// "failed: <layer>: …" whichever path an app took. ok is false when this kernel has no clone3 with
// the flags it needs, nothing was started, and the helper must take it.
func (l *Launcher) startFork(spec Spec, stdout, stderr, hub *os.File, cgroupFD int) (p *Process, ok bool, err error) {
	// What the helper checks when it decodes its input, so that both
	// paths refuse the same specs with the same words.
	if err := spec.Validate(); err != nil {
		return nil, true, layerErr("spec", err.Error(), err)
	}
	prog, err := l.filters.get(spec.Seccomp)
	if err != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, layerErr("seccomp", err.Error(), err))
	}
	// The compiled program passed the same check; checking the one about
	// to be loaded keeps that true whatever fills the cache.
	if err := helper.CheckFilter(prog); err != nil {
		return nil, true, layerErr("seccomp", err.Error(), err)
	}
	if hub == nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, ErrNoHub)
	}
	abi := l.kernel().landlockABI
	if spec.Strict && abi < spec.Landlock.MinABI {
		return nil, true, &LayerError{Layer: "jail", Message: fmt.Sprintf("landlock ABI %d < %d", abi, spec.Landlock.MinABI)}
	}
	rep := Report{LandlockABI: abi, Layers: []string{"env", "fds", "no_new_privs", "caps"}, Missing: []string{}}
	rep.Missing = append(rep.Missing, helper.LandlockMissing(spec.Landlock, abi)...)

	// /proc/self names the daemon here: the child adds its own entry to
	// the ruleset before it restricts itself.
	ls := spec.Landlock
	var procRights uint64
	if i := slices.IndexFunc(ls.Paths, func(p PathRule) bool { return p.Why == "proc" }); i >= 0 && (ls.FS || ls.WriteOnly) {
		procRights = helper.PathRights(ls.Paths[i].Access, true, abi) & landlockABI1FS
		if ls.WriteOnly {
			procRights &= helper.WriteRights
		}
		ls.Paths = slices.Delete(slices.Clone(ls.Paths), i, i+1)
	}
	rulesetFD, llFlags, lerr := helper.BuildRuleset(ls, abi)
	if lerr != nil {
		return nil, true, lerr
	}
	if rulesetFD >= 0 {
		defer unix.Close(rulesetFD)
		rep.Layers = append(rep.Layers, "landlock")
	} else {
		rep.LandlockABI = 0
		if len(rep.Missing) == 0 && (spec.Landlock.FS || spec.Landlock.WriteOnly || spec.Landlock.Net || spec.Landlock.Scope) {
			rep.Missing = []string{"landlock"}
		}
	}
	if l.kernel().seccompAbsent {
		if spec.Strict {
			return nil, true, &LayerError{Layer: "jail", Message: "no seccomp filters in this kernel"}
		}
		rep.Missing = append(rep.Missing, "seccomp")
		prog = nil
	} else {
		rep.Layers = append(rep.Layers, "seccomp")
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

	ea, err := l.execArgs(spec)
	if err != nil {
		return nil, true, fmt.Errorf("start %s: %w", spec.App, layerErr("exec", err.Error(), err))
	}
	defer ea.Free()
	var notifyR, notifyW = -1, -1
	if prog != nil && spec.Notifies() {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, true, fmt.Errorf("start %s: notify socket: %w", spec.App, err)
		}
		notifyR, notifyW = pair[0], pair[1]
		defer unix.Close(notifyR)
		defer unix.Close(notifyW)
	}

	var mem cMem
	defer mem.free()
	// C.malloc never returns nil (cgo aborts instead); the struct is
	// zeroed field by field below or read only where set.
	raw := C.malloc(C.size_t(unsafe.Sizeof(C.struct_ocs_spawn{})))
	mem = append(mem, raw)
	s := (*C.struct_ocs_spawn)(raw)
	*s = C.struct_ocs_spawn{}
	s.path = C.uint64_t(ea.Path)
	s.argv = C.uint64_t(ea.Argv)
	s.envp = C.uint64_t(ea.Envp)
	s.dir = mem.str(spec.Dir)
	for i, f := range []*os.File{devnull, stdout, stderr, hub} {
		s.fds[i] = C.int(f.Fd())
	}
	s.parent_pid = C.int(spec.ParentPID)
	s.cgroup_fd = C.int(max(cgroupFD, -1))
	s.ruleset_fd = C.int(rulesetFD)
	s.landlock_flags = C.uint32_t(llFlags)
	if rulesetFD >= 0 {
		s.proc_access = C.uint64_t(procRights)
	}
	if spec.ExecOnce && prog != nil {
		prog = ea.Gate(prog)
	}
	s.filter = mem.filter(prog)
	s.filter_len = C.uint32_t(len(prog))
	s.notify_sock = C.int(notifyW)
	s.ignored = C.uint64_t(l.ignoredSignals())

	ret := C.ocs_spawn(s)
	// The descriptors were read by the child, which has its own table by
	// now (it exec'd or exited).
	runtime.KeepAlive(stdout)
	runtime.KeepAlive(stderr)
	runtime.KeepAlive(hub)
	if ret < 0 {
		errno := unix.Errno(-ret)
		if s.step == C.OCS_STACK {
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
	p = &Process{Pid: int(s.pid), Pidfd: int(s.pidfd), app: spec.App, log: l.log, forked: true, report: rep, notifySock: -1}
	if step := int(s.step); step != C.OCS_OK {
		p.report = Report{}
		p.err = forkFailure(spec, step, unix.Errno(s.err))
		return p, true, nil
	}
	if notifyR >= 0 {
		// The child sent it before its execve, which is done by now.
		fd, err := helper.RecvFD(notifyR)
		if err != nil {
			p.report = Report{}
			p.err = layerErr("seccomp", "the notify listener: "+err.Error(), err)
			return p, true, nil
		}
		p.notify = newGuard(spec, fd, l.kernel().unprivPort, l.log)
	}
	return p, true, nil
}

// ignoredSignals is the set of signals the daemon ignores, bit n-1 for
// signal n, which the child resets to their default: what the kernel
// said was ignored at the first start (an inherited SIG_IGN the Go
// runtime leaves alone, such as a tmux pane's SIGTTIN and SIGTTOU, which
// signal.Ignored does not report) and what this process ignores through
// os/signal now. Resetting one more than needed is harmless: the child's
// handlers are all default already (CLONE_CLEAR_SIGHAND).
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

// forkFailure is the LayerError of the step the child failed at, or
// ErrHelperDied for a child killed before it reached execve.
func forkFailure(spec Spec, step int, errno unix.Errno) error {
	if step <= 0 || step >= len(ocsStep) {
		return fmt.Errorf("jail: spawn child failed at unknown step %d (errno %d): a bug", step, errno)
	}
	st := ocsStep[step]
	switch step {
	case C.OCS_PARENT_GONE:
		return &LayerError{Layer: st.layer, Message: fmt.Sprintf("daemon (pid %d) is gone", spec.ParentPID)}
	case C.OCS_DIR:
		return layerErr(st.layer, "chdir "+spec.Dir, errno)
	case C.OCS_EXEC:
		return layerErr(st.layer, spec.Program, errno)
	case C.OCS_NO_EXEC:
		// Killed (the exit the caller reaps names the signal): it is the
		// helper dying without a word, on this path.
		return fmt.Errorf("%w: %s", ErrHelperDied, st.msg)
	}
	return layerErr(st.layer, st.msg, errno)
}
