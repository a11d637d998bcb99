package jail

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

// The filter is checked by running the BPF libseccomp compiled on a small
// classic-BPF interpreter: the cases the kernel here cannot show (int 0x80
// faults on this VM whatever the filter says; x32; garbage in the upper
// half of a 32-bit argument) are inputs like any other.

const (
	auditArchX8664 = 0xc000003e
	auditArchI386  = 0x40000003
	retKillProcess = 0x80000000
	retAllow       = 0x7fff0000
	retErrno       = 0x00050000
	retUserNotif   = 0x7fc00000
	x32SyscallBit  = 0x40000000
)

type bpfInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

func (d seccompData) word(off uint32) uint32 {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], uint32(d.nr))
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return binary.LittleEndian.Uint32(b[off:])
}

func compiledFilter(t *testing.T, rules []Syscall) []bpfInsn {
	t.Helper()
	// The program the spawn loads, head and all.
	prog, err := compileBPF(rules)
	if err != nil {
		t.Fatal(err)
	}
	return bpfProg(prog)
}

// runBPF evaluates prog on d as the kernel would.
func runBPF(t *testing.T, prog []bpfInsn, d seccompData) uint32 {
	t.Helper()
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.code {
		case 0x20: // ld [k]
			a = d.word(in.k)
		case 0x00: // ld #k
			a = in.k
		case 0x01: // ldx #k
			x = in.k
		case 0x60: // ld M[k]
			a = mem[in.k]
		case 0x61: // ldx M[k]
			x = mem[in.k]
		case 0x02: // st M[k]
			mem[in.k] = a
		case 0x03: // stx M[k]
			mem[in.k] = x
		case 0x54: // and #k
			a &= in.k
		case 0x44: // or #k
			a |= in.k
		case 0x07: // tax
			x = a
		case 0x87: // txa
			a = x
		case 0x05: // ja
			pc += int(in.k)
		case 0x15, 0x25, 0x35, 0x45: // jeq, jgt, jge, jset #k
			var ok bool
			switch in.code {
			case 0x15:
				ok = a == in.k
			case 0x25:
				ok = a > in.k
			case 0x35:
				ok = a >= in.k
			case 0x45:
				ok = a&in.k != 0
			}
			if ok {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		case 0x06: // ret #k
			return in.k
		case 0x16: // ret a
			return a
		default:
			t.Fatalf("bpf opcode %#x at %d not understood by the test", in.code, pc)
		}
	}
	t.Fatal("bpf program fell off its end")
	return 0
}

func TestFilterVerdicts(t *testing.T) {
	if auditArch() != auditArchX8664 {
		t.Skip("verdict table written for x86_64")
	}
	errno := func(e unix.Errno) uint32 { return retErrno | uint32(e) }
	call := func(nr int, args ...uint64) seccompData {
		d := seccompData{nr: int32(nr), arch: auditArchX8664}
		copy(d.args[:], args)
		return d
	}
	const garbage = 0xdead_beef_0000_0000
	none := seccompRules(ruleSet{network: policy.NetworkNone, fsNarrowed: true})
	tcp := seccompRules(ruleSet{network: policy.NetworkTCP, processes: true, fsNarrowed: true})
	tcpBind := seccompRules(ruleSet{network: policy.NetworkTCP, processes: true, fsNarrowed: true, bindTCP: true})
	tcpABI9 := seccompRules(ruleSet{network: policy.NetworkTCP, processes: true, fsNarrowed: true, unixSockets: true})
	broad := seccompRules(ruleSet{network: policy.NetworkFull, processes: true})
	cases := []struct {
		name  string
		rules []Syscall
		in    seccompData
		want  uint32
	}{
		{"i386 syscall (int 0x80) kills the process", none, seccompData{nr: 1, arch: auditArchI386}, retKillProcess},
		{"x32 syscall kills the process", none, call(unix.SYS_READ | x32SyscallBit), retKillProcess},
		{"read is allowed", none, call(unix.SYS_READ), retAllow},
		{"setxattrat (463, unnamed by libseccomp 2.5) refused", none, call(463), errno(unix.EPERM)},
		{"getxattrat refused", none, call(464), errno(unix.EPERM)},
		{"file_setattr refused", none, call(469), errno(unix.EPERM)},
		{"file_getattr allowed (statx's attributes)", none, call(468), retAllow},
		{"setxattrat allowed for broad", broad, call(463), retAllow},
		{"a syscall newer than the rules is ENOSYS", none, call(NewestSyscall + 1), errno(unix.ENOSYS)},
		{"a syscall newer than the rules is ENOSYS for broad too", broad, call(1000), errno(unix.ENOSYS)},
		{"clone3 is ENOSYS", tcp, call(unix.SYS_CLONE3), errno(unix.ENOSYS)},
		{"thread clone allowed without processes", none, call(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD|unix.CLONE_SIGHAND), retAllow},
		{"process clone refused without processes", none, call(unix.SYS_CLONE, uint64(unix.SIGCHLD)), errno(unix.EPERM)},
		{"process clone allowed with processes", tcp, call(unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		{"clone with CLONE_NEWUSER refused", tcp, call(unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), errno(unix.EPERM)},
		{"TIOCSTI refused", broad, call(unix.SYS_IOCTL, 0, unix.TIOCSTI), errno(unix.EPERM)},
		{"TIOCSTI with garbage above 32 bits refused", broad, call(unix.SYS_IOCTL, 0, garbage|unix.TIOCSTI), errno(unix.EPERM)},
		{"TCGETS allowed", broad, call(unix.SYS_IOCTL, 0, unix.TCGETS), retAllow},
		{"socket refused with network none", none, call(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), errno(unix.EPERM)},
		{"socketpair(AF_UNIX) allowed with network none", none, call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socketpair(AF_INET) refused", none, call(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM), errno(unix.EPERM)},
		{"tcp socket allowed with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP), retAllow},
		{"udp refused with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC), errno(unix.EPERM)},
		{"mptcp refused with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), errno(unix.EPERM)},
		{"AF_INET with garbage above 32 bits still checked", tcp, call(unix.SYS_SOCKET, garbage|unix.AF_INET, unix.SOCK_DGRAM), errno(unix.EPERM)},
		{"vsock refused with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), errno(unix.EPERM)},
		{"family above the table refused", tcp, call(unix.SYS_SOCKET, 200, unix.SOCK_STREAM), errno(unix.EPERM)},
		{"unix socket refused with network tcp below ABI 9", tcp, call(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), errno(unix.EPERM)},
		{"unix socket allowed with network tcp from ABI 9", tcpABI9, call(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"datagram socketpair refused", tcp, call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC), errno(unix.EPERM)},
		{"seqpacket socketpair refused", none, call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET), errno(unix.EPERM)},
		{"type 0 socketpair refused", none, call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, 0), errno(unix.EPERM)},
		{"raw inet socket refused with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, 0), errno(unix.EPERM)},
		{"packet-type inet socket refused with network tcp", tcp, call(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_PACKET|unix.SOCK_CLOEXEC, 0), errno(unix.EPERM)},
		{"stream socketpair with flags allowed", tcp, call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK), retAllow},
		{"MSG_FASTOPEN refused on sendto", tcp, call(unix.SYS_SENDTO, 3, 0, 1, unix.MSG_FASTOPEN|unix.MSG_NOSIGNAL), errno(unix.EPERM)},
		{"MSG_FASTOPEN refused on sendmsg", tcp, call(unix.SYS_SENDMSG, 3, 0, unix.MSG_FASTOPEN), errno(unix.EPERM)},
		{"sendto allowed", tcp, call(unix.SYS_SENDTO, 3, 0, 1, unix.MSG_NOSIGNAL), retAllow},
		{"listen refused without tcp_bind", tcp, call(unix.SYS_LISTEN, 3, 1), errno(unix.EPERM)},
		{"listen goes to the daemon with tcp_bind", tcpBind, call(unix.SYS_LISTEN, 3, 1), retUserNotif},
		{"bind goes to the daemon with tcp_bind", tcpBind, call(unix.SYS_BIND, 3, 0, 16), retUserNotif},
		{"bind refused with network none", none, call(unix.SYS_BIND, 3, 0, 16), errno(unix.EPERM)},
		{"inotify_add_watch goes to the daemon", none, call(unix.SYS_INOTIFY_ADD_WATCH, 3, 0, unix.IN_CREATE), retUserNotif},
		{"inotify_add_watch allowed for broad", broad, call(unix.SYS_INOTIFY_ADD_WATCH, 3, 0, unix.IN_CREATE), retAllow},
		{"PR_SET_PDEATHSIG 0 refused", broad, call(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, 0), errno(unix.EPERM)},
		{"PR_SET_PDEATHSIG SIGKILL allowed", broad, call(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uint64(unix.SIGKILL)), retAllow},
		{"PR_SET_NAME allowed", broad, call(unix.SYS_PRCTL, unix.PR_SET_NAME, 0), retAllow},
		{"clone with CLONE_PARENT refused", broad, call(unix.SYS_CLONE, unix.CLONE_PARENT|uint64(unix.SIGCHLD)), errno(unix.EPERM)},
		{"setpriority of the caller allowed", broad, call(unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 0, 10), retAllow},
		{"setpriority of another process refused", broad, call(unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 4242, 10), errno(unix.EPERM)},
		{"prlimit of another process refused", broad, call(unix.SYS_PRLIMIT64, 4242, unix.RLIMIT_NOFILE, 0x1000, 0), errno(unix.EPERM)},
		{"prlimit read of another process allowed", broad, call(unix.SYS_PRLIMIT64, 4242, unix.RLIMIT_NOFILE, 0, 0x1000), retAllow},
		{"openat of a setuid file refused", none, call(unix.SYS_OPENAT, 0, 0, unix.O_CREAT, 0o4755), errno(unix.EPERM)},
		{"openat of a plain file allowed", none, call(unix.SYS_OPENAT, 0, 0, unix.O_CREAT, 0o755), retAllow},
		{"shmget refused when files are narrowed", none, call(unix.SYS_SHMGET), errno(unix.EPERM)},
		{"execveat refused without processes", none, call(unix.SYS_EXECVEAT), errno(unix.EPERM)},
		{"udp allowed with network full", broad, call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM), retAllow},
		{"personality query allowed", none, call(unix.SYS_PERSONALITY, 0xffffffff), retAllow},
		{"personality change refused", none, call(unix.SYS_PERSONALITY, 0x0040000), errno(unix.EPERM)},
		{"chmod refused when files are narrowed", none, call(unix.SYS_CHMOD), errno(unix.EPERM)},
		{"chmod allowed for broad", broad, call(unix.SYS_CHMOD), retAllow},
		{"fchmod refused when files are narrowed", none, call(unix.SYS_FCHMOD), errno(unix.EPERM)},
		{"fchmod allowed for broad", broad, call(unix.SYS_FCHMOD), retAllow},
		{"ptrace refused for broad", broad, call(unix.SYS_PTRACE), errno(unix.EPERM)},
		{"new mount API refused", broad, call(unix.SYS_FSOPEN), errno(unix.EPERM)},
		{"io_uring refused", broad, call(unix.SYS_IO_URING_SETUP), errno(unix.EPERM)},
		{"fork refused without processes", none, call(unix.SYS_FORK), errno(unix.EPERM)},
		{"vfork allowed with processes", tcp, call(unix.SYS_VFORK), retAllow},
	}
	progs := map[*Syscall][]bpfInsn{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prog, ok := progs[&c.rules[0]]
			if !ok {
				prog = compiledFilter(t, c.rules)
				progs[&c.rules[0]] = prog
			}
			if got := runBPF(t, prog, c.in); got != c.want {
				t.Errorf("verdict %#x, want %#x", got, c.want)
			}
		})
	}
}

// TestCompiledFiltersPassTheHelper: what libseccomp compiles for every
// kind of app passes the helper's check (the native arch test in front,
// other arches killed), so the check refuses only what it should.
func TestCompiledFiltersPassTheHelper(t *testing.T) {
	for _, network := range []policy.Network{policy.NetworkNone, policy.NetworkTCP, policy.NetworkFull} {
		for _, processes := range []bool{false, true} {
			for _, fs := range []bool{false, true} {
				for _, bind := range []bool{false, true} {
					rs := ruleSet{network: network, processes: processes, fsNarrowed: fs, bindTCP: bind}
					prog, err := compileBPF(seccompRules(rs))
					if err != nil {
						t.Fatalf("%+v: %v", rs, err)
					}
					if err := helper.CheckFilter(prog); err != nil {
						t.Errorf("%+v: %v", rs, err)
					}
				}
			}
		}
	}
}

// auditArch is this build's AUDIT_ARCH value, as the filter's arch check
// sees it.
func auditArch() uint32 {
	if unix.SYS_CLONE3 == 435 && unix.SYS_READ == 0 {
		return auditArchX8664
	}
	return 0
}

// TestExecGate: the gate lets execve through with exactly the laid-out
// pointers, refuses any other execve, leaves every other call to the
// filters under it, and kills another architecture's calls; the arena
// gives new pointers each time and the bytes execve reads.
func TestExecGate(t *testing.T) {
	if auditArch() != auditArchX8664 {
		t.Skip("verdict table written for x86_64")
	}
	arena, err := helper.NewArena()
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := helper.NewExecArgs("/bin/true", []string{"true"}, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Free()
	seen := map[uintptr]bool{}
	for i := range 50 {
		ea := fresh
		if i > 0 {
			var ok bool
			if ea, ok, err = arena.Place("/bin/true", []string{"true", "--x"}, []string{"A=1", "B=2"}); err != nil || !ok {
				t.Fatalf("place: %v %v", ok, err)
			}
			seen[ea.Path] = true
			if _, lent, _ := arena.Place("/bin/true", nil, nil); lent {
				t.Fatal("an arena still lent out was placed in again")
			}
		}
		// The gate alone, and in front of an app's filter (here one
		// that answers EACCES to everything, to tell its verdicts apart).
		eacces := retErrno | uint32(unix.EACCES)
		next := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: eacces}}
		prog, gated := bpfProg(ea.Gate(nil)), bpfProg(ea.Gate(next))
		if err := helper.CheckFilter(ea.Gate(nil)); err != nil {
			t.Fatal(err)
		}
		if err := helper.CheckFilter(ea.Gate(next)); err != nil {
			t.Fatal(err)
		}
		exec := func(p, a, e uintptr) seccompData {
			return seccompData{nr: unix.SYS_EXECVE, arch: auditArchX8664, args: [6]uint64{uint64(p), uint64(a), uint64(e)}}
		}
		for _, c := range []struct {
			name string
			in   seccompData
			want uint32
		}{
			{"the spawn's own execve", exec(ea.Path, ea.Argv, ea.Envp), retAllow},
			{"another path", exec(ea.Path+8, ea.Argv, ea.Envp), retErrno | uint32(unix.EPERM)},
			{"another argv", exec(ea.Path, ea.Argv^1<<40, ea.Envp), retErrno | uint32(unix.EPERM)},
			{"another envp", exec(ea.Path, ea.Argv, 0), retErrno | uint32(unix.EPERM)},
			{"read", seccompData{nr: unix.SYS_READ, arch: auditArchX8664}, retAllow},
			{"i386", seccompData{nr: 11, arch: auditArchI386}, retKillProcess},
		} {
			if got := runBPF(t, prog, c.in); got != c.want {
				t.Errorf("%s: verdict %#x, want %#x", c.name, got, c.want)
			}
			// In front of the app's filter: what the gate alone allows
			// goes on to that filter's verdict.
			want := c.want
			if want == retAllow {
				want = eacces
			}
			if got := runBPF(t, gated, c.in); got != want {
				t.Errorf("%s, gated: verdict %#x, want %#x", c.name, got, want)
			}
		}
		// What execve will read there.
		if got := unix.BytePtrToString((*byte)(unsafe.Add(unsafe.Pointer(nil), ea.Path))); got != "/bin/true" {
			t.Errorf("path %q", got)
		}
		argv0 := *(**byte)(unsafe.Add(unsafe.Pointer(nil), ea.Argv))
		if got := unix.BytePtrToString(argv0); got != "true" {
			t.Errorf("argv[0] %q", got)
		}
		if i > 0 {
			ea.Free()
		}
	}
	// 49 draws from ~8k slots: a birthday pair or two is expected, a
	// fixed or narrow offset is not.
	if len(seen) < 40 {
		t.Errorf("49 placements used %d path addresses", len(seen))
	}
}

func bpfProg(f []unix.SockFilter) []bpfInsn {
	prog := make([]bpfInsn, 0, len(f))
	for _, in := range f {
		prog = append(prog, bpfInsn{code: in.Code, jt: in.Jt, jf: in.Jf, k: in.K})
	}
	return prog
}
