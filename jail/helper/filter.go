package helper

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// MaxFilter is the kernel's bound on a filter's length (BPF_MAXINSNS).
const MaxFilter = 4096

// ErrBadFilter is wrapped by every error CheckFilter returns.
var ErrBadFilter = errors.New("invalid seccomp filter")

// BPF opcodes the arch check is made of, and seccomp's kill verdict.
const (
	bpfLdWAbs    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK      = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfRetK      = unix.BPF_RET | unix.BPF_K
	archOffset   = 4 // offsetof(struct seccomp_data, arch)
	retKillProc  = 0x80000000
	sockFilterSz = 8
)

// ParseFilter reads raw sock_filter records (libseccomp's export) and
// checks them.
func ParseFilter(raw []byte) ([]unix.SockFilter, error) {
	if len(raw)%sockFilterSz != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of instructions", ErrBadFilter, len(raw))
	}
	prog := make([]unix.SockFilter, len(raw)/sockFilterSz)
	for i := range prog {
		r := raw[sockFilterSz*i:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	if err := CheckFilter(prog); err != nil {
		return nil, err
	}
	return prog, nil
}

// RefuseNewer puts in front of prog the answer ENOSYS for every native
// syscall number above newest; x32's (bit 30) go on to prog, which kills
// them as another architecture's. libseccomp cannot say "above a
// number", so it is written here, with its own arch test (as CheckFilter
// wants it) like the exec gate's.
func RefuseNewer(prog []unix.SockFilter, newest uint32) []unix.SockFilter {
	const (
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jgt = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
		x32 = 0x40000000
	)
	// 0 arch, 1 native?, 2 nr, 3 x32?, 4 newer?, 5 ENOSYS, 6 kill, 7 prog.
	head := []unix.SockFilter{
		{Code: bpfLdWAbs, K: archOffset},
		{Code: bpfJeqK, K: nativeAuditArch, Jf: 6 - 1 - 1},
		{Code: bpfLdWAbs, K: 0},
		{Code: jge, K: x32, Jt: 7 - 3 - 1},
		{Code: jgt, K: newest, Jf: 7 - 4 - 1},
		{Code: bpfRetK, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: bpfRetK, K: retKillProc},
	}
	return append(head, prog...)
}

// CheckFilter refuses a program the sequence must not load: empty, longer
// than the kernel takes, or not beginning with the architecture check
// that keeps another ABI's syscalls (int 0x80, x32) from slipping past
// rules written for native numbers: a load of seccomp_data.arch, a
// compare with this machine's AUDIT_ARCH, and a mismatch that kills the
// process. The kernel checks the rest of the program when it loads it.
func CheckFilter(prog []unix.SockFilter) error {
	if len(prog) < 3 || len(prog) > MaxFilter {
		return fmt.Errorf("%w: %d instructions, want 3 to %d", ErrBadFilter, len(prog), MaxFilter)
	}
	if nativeAuditArch == 0 {
		return fmt.Errorf("%w: no AUDIT_ARCH known for %s: the jail cannot check the filter's arch test", ErrBadFilter, runtime.GOARCH)
	}
	if in := prog[0]; in.Code != bpfLdWAbs || in.K != archOffset {
		return fmt.Errorf("%w: does not begin with a load of seccomp_data.arch (first instruction %#x k=%#x)", ErrBadFilter, in.Code, in.K)
	}
	in := prog[1]
	if in.Code != bpfJeqK || in.K != nativeAuditArch {
		return fmt.Errorf("%w: second instruction (%#x k=%#x) is not a compare with AUDIT_ARCH %#x", ErrBadFilter, in.Code, in.K, uint32(nativeAuditArch))
	}
	miss := 2 + int(in.Jf)
	if miss >= len(prog) || prog[miss].Code != bpfRetK || prog[miss].K != retKillProc {
		return fmt.Errorf("%w: another architecture's syscalls do not kill the process", ErrBadFilter)
	}
	return nil
}

// SeccompAbsent tells a kernel without seccomp filters from a filter the
// kernel refused.
func SeccompAbsent() bool {
	return unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0) == unix.EINVAL
}
