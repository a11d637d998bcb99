package helper

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The exec gate (Spec.ExecOnce, processes: false). After its own exec a
// processes: false app must execute nothing: Landlock's execute right
// does not hold that alone, since a memfd (execveat, or execve of
// /proc/self/fd/N) is on no path a rule governs, and the ELF interpreter,
// which the program needs, runs any readable binary given as its
// argument.
//
// A filter cannot count, and the one execve to let through is made by
// the spawn itself, after the filters are loaded. What tells it apart is
// its arguments: the path, argv and envp pointers of that one call, laid
// out at addresses chosen with getrandom (ExecArgs). The gate, a second
// filter stacked on the app's, lets execve through only with exactly
// those three pointers. The app cannot learn them: they live in the
// memory of the process before its exec (the daemon's, for an in-process
// spawn), which the exec replaces, and a filter's program cannot be read
// back without CAP_SYS_ADMIN. Guessing takes ~2^132 tries (three
// pointers of ~44 bits each: a page of the 47-bit address space and an
// 8-byte slot in it). The kernel only compares numbers, so an app that
// maps memory at a guessed address gains nothing unless all three match.

// ExecArgs is one execve's arguments, each at an unpredictable address
// of its own mapping.
type ExecArgs struct {
	Path, Argv, Envp uintptr
	maps             [][]byte
	arena            *Arena // lent by Arena.Place until Free
	// data holds the bytes at Path, Argv and Envp, for Regions.
	data [3][]byte
}

// userTop bounds the addresses chosen: x86-64's and arm64's 47/48-bit
// user space, below the stack's usual place.
const (
	userLow  = 1 << 32 // clear of the program's image and the heap's start
	userHigh = 1 << 46
	pageSize = 4096
)

// An Arena is one mapping at a random address, in which ExecArgs are
// laid out again and again, each time at new random offsets: the
// in-process spawn's. Three mappings made and unmapped per start cost a
// sixth of the daemon's work for a start (each munmap shoots down the
// TLBs of the daemon's other threads). Guessing then takes ~2^74 tries:
// the arena's page (~2^34) and an 8-byte slot for each of the three
// pointers in its third of the arena (~2^13 each).
type Arena struct {
	mem  []byte
	base uintptr
	// busy is set from Place until the ExecArgs' Free: a second start
	// while one is under way gets mappings of its own, not a clobbered
	// layout.
	busy atomic.Bool
}

// arenaSlot is each pointer's third of an Arena.
const arenaSlot = 64 << 10

// NewArena maps an Arena. It is never unmapped: it lives as long as the
// daemon's spawns.
func NewArena() (*Arena, error) {
	var e ExecArgs
	base, err := e.place(func(uintptr, []byte) {}, 3*arenaSlot, false)
	if err != nil {
		return nil, err
	}
	return &Arena{mem: e.maps[0], base: base}, nil
}

// Place lays out path, argv and env in the arena, each in its own third
// at a random 8-byte offset; ok is false when one does not fit or the
// arena is lent out (then use NewExecArgs). The arguments stay valid
// until the ExecArgs' Free, which the caller calls once the exec is done
// (the vfork child's is when clone returns).
func (a *Arena) Place(path string, argv, env []string) (e *ExecArgs, ok bool, err error) {
	if !a.busy.CompareAndSwap(false, true) {
		return nil, false, nil
	}
	lent := false
	defer func() {
		if !lent {
			a.busy.Store(false)
		}
	}()
	items := []struct {
		size int
		fill func(base uintptr, b []byte)
	}{
		{len(path) + 1, func(_ uintptr, b []byte) { copy(b, path); b[len(path)] = 0 }},
		{vectorSize(argv), func(base uintptr, b []byte) { fillVector(base, b, argv) }},
		{vectorSize(env), func(base uintptr, b []byte) { fillVector(base, b, env) }},
	}
	var rnd [24]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return nil, false, fmt.Errorf("exec gate: getrandom: %w", err)
	}
	var ptr [3]uintptr
	var data [3][]byte
	for i, it := range items {
		if it.size > arenaSlot {
			return nil, false, nil
		}
		slots := uint64((arenaSlot - it.size) / 8)
		off := i*arenaSlot + 8*int(binary.NativeEndian.Uint64(rnd[8*i:])%(slots+1))
		it.fill(a.base+uintptr(off), a.mem[off:off+it.size])
		ptr[i] = a.base + uintptr(off)
		data[i] = a.mem[off : off+it.size]
	}
	lent = true
	return &ExecArgs{Path: ptr[0], Argv: ptr[1], Envp: ptr[2], arena: a, data: data}, true, nil
}

func vectorSize(ss []string) int {
	size := 8 * (len(ss) + 1)
	for _, s := range ss {
		size += len(s) + 1
	}
	return size
}

// fillVector writes a NULL-terminated array of pointers to ss, then the
// strings, into b, which is at address base.
func fillVector(base uintptr, b []byte, ss []string) {
	str := 8 * (len(ss) + 1)
	for i, s := range ss {
		binary.NativeEndian.PutUint64(b[8*i:], uint64(base)+uint64(str))
		copy(b[str:], s)
		b[str+len(s)] = 0
		str += len(s) + 1
	}
	binary.NativeEndian.PutUint64(b[8*len(ss):], 0)
}

// NewExecArgs lays out path, argv and env as execve takes them. Free
// releases the mappings; the caller must not free before the exec is done
// (a vfork child reads them).
func NewExecArgs(path string, argv, env []string) (*ExecArgs, error) {
	e := &ExecArgs{}
	var err error
	if e.Path, err = e.place(func(base uintptr, b []byte) { copy(b, path) }, len(path)+1, true); err != nil {
		e.Free()
		return nil, err
	}
	if e.Argv, err = e.placeVector(argv); err != nil {
		e.Free()
		return nil, err
	}
	if e.Envp, err = e.placeVector(env); err != nil {
		e.Free()
		return nil, err
	}
	return e, nil
}

// placeVector puts a NULL-terminated array of pointers to strings, and
// the strings after it, in a mapping of its own; it returns the array's
// address.
func (e *ExecArgs) placeVector(ss []string) (uintptr, error) {
	return e.place(func(base uintptr, b []byte) { fillVector(base, b, ss) }, vectorSize(ss), true)
}

// place maps size bytes at a random page, at a random 8-byte offset in
// it when offset says so, and fills them with fill (given the address of
// its first byte).
func (e *ExecArgs) place(fill func(base uintptr, b []byte), size int, offset bool) (uintptr, error) {
	return e.placeBelow(fill, size, offset, userHigh)
}

// placeBelow is place with pages drawn below high. A page past the end of
// the address space (ENOMEM: arm64 kernels with 39-bit addresses, UML)
// becomes the new bound, so the draws shrink to the space there is.
func (e *ExecArgs) placeBelow(fill func(base uintptr, b []byte), size int, offset bool, high uintptr) (uintptr, error) {
	var rnd [8]byte
	for try := 0; try < 64; try++ {
		if _, err := unix.Getrandom(rnd[:], 0); err != nil {
			return 0, fmt.Errorf("exec gate: getrandom: %w", err)
		}
		r := binary.NativeEndian.Uint64(rnd[:])
		off := uintptr(r&(pageSize/8-1)) * 8
		if !offset {
			off = 0
		}
		page := uintptr(userLow + (uint64(r>>9)%uint64((high-userLow)/pageSize))*pageSize)
		length := (int(off) + size + pageSize - 1) &^ (pageSize - 1)
		// The hint is an address, not Go memory: unsafe.Add from nil says so.
		p, err := unix.MmapPtr(-1, 0, unsafe.Add(unsafe.Pointer(nil), page), uintptr(length), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
		if err == unix.EEXIST {
			continue
		}
		if err == unix.ENOMEM && page > userLow+16*pageSize {
			high = page
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("exec gate: mmap: %w", err)
		}
		m := unsafe.Slice((*byte)(p), length)
		if uintptr(p) != page {
			// A kernel before MAP_FIXED_NOREPLACE (4.17) took it as a hint.
			unix.MunmapPtr(p, uintptr(length))
			continue
		}
		e.maps = append(e.maps, m)
		fill(page+off, m[off:])
		if n := len(e.maps) - 1; n < len(e.data) {
			e.data[n] = m[off : int(off)+size]
		}
		return page + off, nil
	}
	return 0, fmt.Errorf("exec gate: no free address found")
}

// Bytes are the bytes at Path, Argv and Envp, valid until Free: a helper
// maps them at the same addresses, where the exec gate expects them.
func (e *ExecArgs) Bytes() [3][]byte { return e.data }

// Free unmaps the arguments.
func (e *ExecArgs) Free() {
	for _, m := range e.maps {
		unix.MunmapPtr(unsafe.Pointer(&m[0]), uintptr(len(m)))
	}
	e.maps = nil
	if e.arena != nil {
		e.arena.busy.Store(false)
		e.arena = nil
	}
}

// Exec is the raw execve of these arguments; it returns only on failure.
func (e *ExecArgs) Exec() error {
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, e.Path, e.Argv, e.Envp)
	return errno
}

// Gate puts the exec gate in front of prog, the app's filter, as one
// program: execve goes on into prog only with these arguments (EPERM for
// any other execve), every other call goes straight into prog. With prog
// nil the gate ends in ALLOW, a filter of its own. One program, not a
// second filter stacked on the app's: the kernel JIT-compiles each filter
// it loads, which cost a start ~60 µs more here (perf trace of seccomp(2)
// during make bench), and the verdicts are the same, since a stacked
// ALLOW defers to the filter under it. It begins with the arch check
// CheckFilter wants; prog's own jumps are relative, so they hold after it.
func (e *ExecArgs) Gate(prog []unix.SockFilter) []unix.SockFilter {
	const (
		nrOff = 0
		args  = 16 // offsetof(struct seccomp_data, args)
	)
	// 0 arch, 1 compare, 2 nr, 3 execve?, 4–15 three args in two halves,
	// 16 allow (nothing follows) or on into prog, 17 EPERM, 18 kill, 19
	// prog.
	const onward, eperm, kill, start = 16, 17, 18, 19
	jf := func(at, to int) uint8 { return uint8(to - at - 1) }
	notExecve := jf(3, onward)
	if prog != nil {
		notExecve = jf(3, start)
	}
	gate := make([]unix.SockFilter, 0, start+len(prog))
	gate = append(gate,
		unix.SockFilter{Code: bpfLdWAbs, K: archOffset},
		unix.SockFilter{Code: bpfJeqK, K: nativeAuditArch, Jf: jf(1, kill)},
		unix.SockFilter{Code: bpfLdWAbs, K: nrOff},
		unix.SockFilter{Code: bpfJeqK, K: unix.SYS_EXECVE, Jf: notExecve},
	)
	for i, v := range []uintptr{e.Path, e.Argv, e.Envp} {
		for half := range 2 {
			at := len(gate)
			// Little-endian halves (x86-64, arm64): low word first.
			k := uint32(uint64(v) >> (32 * half))
			gate = append(gate,
				unix.SockFilter{Code: bpfLdWAbs, K: uint32(args + 8*i + 4*half)},
				unix.SockFilter{Code: bpfJeqK, K: k, Jf: jf(at+1, eperm)})
		}
	}
	if prog == nil {
		gate = append(gate, unix.SockFilter{Code: bpfRetK, K: unix.SECCOMP_RET_ALLOW})
	} else {
		gate = append(gate, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: start - onward - 1})
	}
	gate = append(gate,
		unix.SockFilter{Code: bpfRetK, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		unix.SockFilter{Code: bpfRetK, K: retKillProc},
	)
	return append(gate, prog...)
}
