// Package spawn is the jail's setup sequence, the code that runs between
// fork and exec of every jailed app, written once in C (spawn.c), and its
// launchers:
//
//   - Fork, the in-process spawn: a clone3(CLONE_VM|CLONE_VFORK) child of
//     the calling thread runs the sequence in the daemon's address space
//     (x86-64, Linux 5.11 or later);
//   - the helper: any binary linking this package (cmd/octosup-jail,
//     octosupd, the test binaries) run as [binary, Arg], with the input
//     on InputFD and a status pipe on StatusFD. A constructor runs the
//     sequence before the binary's Go runtime starts, so a helper start
//     costs an exec and the dynamic loader (none for the static
//     octosup-jail make builds), never a runtime. RunHelper is the same
//     for a caller that reaches main.
//
// Both read the same Input, which the daemon prepares (package jail):
// everything the sequence needs, laid out in one buffer, in C memory for
// Fork, in a memfd for the helper. The package imports no libseccomp: it
// is all octosup-jail links.
package spawn

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The helper's constants are spawn.h's; consts.go repeats them for a
// build without cgo. These fail to compile if the two ever differ.
const (
	_ = uint(C.OCS_STATUS_FD-StatusFD) + uint(StatusFD-C.OCS_STATUS_FD)
	_ = uint(C.OCS_INPUT_FD-InputFD) + uint(InputFD-C.OCS_INPUT_FD)
	_ = uint(C.OCS_HELPER_EXIT-Exit) + uint(Exit-C.OCS_HELPER_EXIT)
	_ = uint(C.OCS_NO_CGO-stepNoCgo) + uint(stepNoCgo-C.OCS_NO_CGO)
)

// cArg is spawn.h's helper argument (TestConstants holds Arg to it).
const cArg = C.OCS_HELPER_ARG

// RunHelper is the helper's whole life, for a binary whose constructor
// did not run it already: it reads the input, runs the sequence and execs
// the app. It returns only on failure, with the exit code, after writing
// the failing step on the status pipe.
func RunHelper() int { return int(C.ocs_helper_main()) }

// magic begins every input; its last byte is the version.
const magic = C.OCS_MAGIC

const (
	StepOK               Step = C.OCS_OK
	StepSigmask          Step = C.OCS_SIGMASK
	StepFDs              Step = C.OCS_FDS
	StepSetsid           Step = C.OCS_SETSID
	StepNoNewPrivs       Step = C.OCS_NO_NEW_PRIVS
	StepPdeathsig        Step = C.OCS_PDEATHSIG
	StepParentGone       Step = C.OCS_PARENT_GONE
	StepCaps             Step = C.OCS_CAPS
	StepDir              Step = C.OCS_DIR
	StepLandlockProc     Step = C.OCS_LANDLOCK_PROC
	StepLandlockRestrict Step = C.OCS_LANDLOCK_RESTRICT
	StepSeccomp          Step = C.OCS_SECCOMP
	StepNotify           Step = C.OCS_NOTIFY
	StepExec             Step = C.OCS_EXEC
	StepNoExec           Step = C.OCS_NO_EXEC
	StepStack            Step = C.OCS_STACK
	StepInputRead        Step = C.OCS_INPUT_READ
	StepInputBad         Step = C.OCS_INPUT_BAD
	StepExecArgs         Step = C.OCS_EXEC_ARGS
	StepNoCgo            Step = C.OCS_NO_CGO
)

// Params is what one start's sequence applies; NewInput lays it out.
type Params struct {
	// Path, Argv and Envp are execve's arguments, at the addresses the
	// exec gate knows: in this process for Fork; Regions carries their
	// bytes to the helper, which maps them at the same addresses.
	Path, Argv, Envp uintptr
	Regions          []Region
	Dir              string
	// FDs become 0 to 3: this process's descriptors for Fork, the
	// helper's own for it.
	FDs       [4]int
	ParentPID int
	// RulesetFD is the Landlock ruleset (-1: none), enforced with
	// LandlockFlags after ProcAccess (0: no rule) is granted on the
	// process's own /proc entry.
	RulesetFD     int
	LandlockFlags uint32
	ProcAccess    uint64
	// Filter is the seccomp program (nil: none), loaded with a listener
	// sent down NotifySock when that is >= 0.
	Filter     []unix.SockFilter
	NotifySock int
	// Ignored are the signals to reset to their default, bit n-1 for
	// signal n.
	Ignored uint64
}

// Region is memory the helper maps at Addr, with Data in it.
type Region struct {
	Addr uintptr
	Data []byte
}

// Input is a prepared buffer, in C memory: Fork's child reads it in this
// process, and the helper reads a copy (Bytes) from its memfd.
type Input struct {
	p unsafe.Pointer
	n int
}

// NewInput lays p out as spawn.h's struct ocs_input and what follows it.
func NewInput(p *Params) *Input {
	const (
		head   = int(C.sizeof_struct_ocs_input)
		insn   = int(C.sizeof_struct_ocs_filter)
		region = int(C.sizeof_struct_ocs_region)
	)
	align := func(n int) int { return (n + 7) &^ 7 }
	dir := head
	filter := align(dir + len(p.Dir) + 1)
	regions := align(filter + insn*len(p.Filter))
	data := regions + region*len(p.Regions)
	size := data
	for _, r := range p.Regions {
		size += len(r.Data)
	}
	// C.malloc never returns nil (cgo aborts instead), and its memory is
	// 8-aligned, as ocs_check wants.
	raw := C.malloc(C.size_t(size))
	b := unsafe.Slice((*byte)(raw), size)
	clear(b)

	in := (*C.struct_ocs_input)(raw)
	for i := range len(magic) {
		in.magic[i] = C.char(magic[i])
	}
	in.size = C.uint32_t(size)
	in.dir = C.uint32_t(dir)
	copy(b[dir:], p.Dir)
	in.filter = C.uint32_t(filter)
	in.filter_len = C.uint32_t(len(p.Filter))
	for i, f := range p.Filter {
		o := b[filter+insn*i:]
		binary.NativeEndian.PutUint16(o, f.Code)
		o[2], o[3] = f.Jt, f.Jf
		binary.NativeEndian.PutUint32(o[4:], f.K)
	}
	in.regions = C.uint32_t(regions)
	in.nregions = C.uint32_t(len(p.Regions))
	rs := unsafe.Slice((*C.struct_ocs_region)(unsafe.Add(raw, regions)), len(p.Regions))
	for i, r := range p.Regions {
		rs[i] = C.struct_ocs_region{addr: C.uint64_t(r.Addr), off: C.uint32_t(data), len: C.uint32_t(len(r.Data))}
		data += copy(b[data:], r.Data)
	}
	in.path, in.argv, in.envp = C.uint64_t(p.Path), C.uint64_t(p.Argv), C.uint64_t(p.Envp)
	for i, fd := range p.FDs {
		in.fds[i] = C.int32_t(fd)
	}
	in.parent_pid = C.int32_t(p.ParentPID)
	in.ruleset_fd = C.int32_t(p.RulesetFD)
	in.landlock_flags = C.uint32_t(p.LandlockFlags)
	in.proc_access = C.uint64_t(p.ProcAccess)
	in.notify_sock = C.int32_t(p.NotifySock)
	in.ignored = C.uint64_t(p.Ignored)
	return &Input{p: raw, n: size}
}

// Bytes is the buffer, valid until Free.
func (in *Input) Bytes() []byte { return unsafe.Slice((*byte)(in.p), in.n) }

// Free releases the buffer: after Fork returned, or once the helper's
// memfd holds it.
func (in *Input) Free() {
	C.free(in.p)
	in.p, in.n = nil, 0
}

// Status is where the sequence stopped and the errno of that step.
type Status struct {
	Step  Step
	Errno unix.Errno
}

// Forked is a child Fork started.
type Forked struct {
	Pid, Pidfd int
	Status     Status // StepOK: it reached execve
}

// Fork runs in's sequence in a vfork child of the calling thread, into
// the cgroup cgroupFD when it is positive; it returns once the child
// exec'd or exited. The errno is clone3's (ENOSYS: not on this
// architecture or kernel), or mmap's with Status.Step StepStack: nothing
// was started.
func Fork(in *Input, cgroupFD int) (Forked, unix.Errno) {
	st := (*C.struct_ocs_status)(C.malloc(C.size_t(C.sizeof_struct_ocs_status)))
	defer C.free(unsafe.Pointer(st))
	var pid, pidfd C.int
	if C.ocs_check(in.p, C.uint64_t(in.n)) != 0 {
		return Forked{Pid: -1, Pidfd: -1, Status: Status{Step: StepInputBad}}, unix.EINVAL
	}
	ret := C.ocs_fork(in.p, C.int(cgroupFD), st, &pid, &pidfd)
	f := Forked{Pid: int(pid), Pidfd: int(pidfd), Status: Status{Step: Step(st.step), Errno: unix.Errno(st.err)}}
	if ret < 0 {
		return f, unix.Errno(-ret)
	}
	return f, 0
}

// statusSize is one record on the helper's status pipe.
const statusSize = int(C.sizeof_struct_ocs_status)

// ParseStatus reads what the helper wrote on its status pipe up to EOF,
// records of struct ocs_status: the last says where it stopped (StepOK
// then EOF: the exec succeeded). ok is false when there is no whole
// record: the helper died before it wrote one.
func ParseStatus(b []byte) (st Status, ok bool) {
	if len(b) < statusSize || len(b)%statusSize != 0 {
		return Status{}, false
	}
	last := b[len(b)-statusSize:]
	return Status{Step: Step(int32(binary.NativeEndian.Uint32(last))), Errno: unix.Errno(binary.NativeEndian.Uint32(last[4:]))}, true
}
