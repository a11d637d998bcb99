package jail

import (
	"golang.org/x/sys/unix"

	"octosup/policy"
)

// The seccomp deny list (SPEC §2.5). The filter allows by default: it is a
// list of what no app may do, on top of Landlock's allow list of what it
// may reach. Names the running libseccomp or architecture does not know
// are skipped when the filter is built.

const mask32 = 0xffffffff

// denied lists syscalls every app is refused, with the reason.
var denied = [...]struct{ name, why string }{
	{"ptrace", "debug other processes"},
	{"process_vm_readv", "read another process's memory"},
	{"process_vm_writev", "write another process's memory"},
	{"process_madvise", "act on another process's memory"},
	{"pidfd_getfd", "steal another process's fds"},
	{"kcmp", "compare other processes' kernel objects"},
	{"perf_event_open", "kernel and cross-process profiling"},
	{"bpf", "load kernel programs"},
	{"userfaultfd", "stall the kernel on page faults"},
	{"kexec_load", "replace the kernel"},
	{"kexec_file_load", "replace the kernel"},
	{"init_module", "load kernel modules"},
	{"finit_module", "load kernel modules"},
	{"delete_module", "unload kernel modules"},
	{"mount", "mount"},
	{"umount2", "mount"},
	{"pivot_root", "mount"},
	{"chroot", "mount"},
	{"move_mount", "mount"},
	{"fsopen", "mount"},
	{"fsconfig", "mount"},
	{"fsmount", "mount"},
	{"fspick", "mount"},
	{"open_tree", "mount"},
	{"open_tree_attr", "mount"},
	{"mount_setattr", "mount"},
	{"unshare", "new namespaces"},
	{"setns", "enter namespaces"},
	{"keyctl", "kernel keyrings"},
	{"add_key", "kernel keyrings"},
	{"request_key", "kernel keyrings"},
	{"io_uring_setup", "io_uring bypasses the syscall filter"},
	{"io_uring_enter", "io_uring bypasses the syscall filter"},
	{"io_uring_register", "io_uring bypasses the syscall filter"},
	{"open_by_handle_at", "opens files around path checks"},
	{"name_to_handle_at", "file handles for open_by_handle_at"},
	{"swapon", "system administration"},
	{"swapoff", "system administration"},
	{"reboot", "system administration"},
	{"acct", "system administration"},
	{"quotactl", "system administration"},
	{"quotactl_fd", "system administration"},
	{"syslog", "kernel log"},
	{"iopl", "raw I/O ports"},
	{"ioperm", "raw I/O ports"},
	{"fanotify_init", "watch the whole filesystem"},
	{"lookup_dcookie", "obsolete profiling"},
	{"uselib", "obsolete"},
	{"nfsservctl", "obsolete"},
	{"vm86", "obsolete"},
	{"vm86old", "obsolete"},
}

// namespaceFlags are clone() flags that create namespaces.
var namespaceFlags = [...]struct {
	flag uint64
	name string
}{
	{unix.CLONE_NEWNS, "CLONE_NEWNS"},
	{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
	{unix.CLONE_NEWUTS, "CLONE_NEWUTS"},
	{unix.CLONE_NEWIPC, "CLONE_NEWIPC"},
	{unix.CLONE_NEWUSER, "CLONE_NEWUSER"},
	{unix.CLONE_NEWPID, "CLONE_NEWPID"},
	{unix.CLONE_NEWNET, "CLONE_NEWNET"},
}

// familyLimit bounds the address families enumerated one by one; anything
// above is refused by a single comparison.
const familyLimit = 64

// pathMetadata change a path's mode, owner or attributes: Landlock does
// not see them, so a jailed app could chmod the user's files anywhere it
// can name. The fd variants (fchmod, fchown, fsetxattr) stay: they act on
// files the app could open.
var pathMetadata = [...]string{"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat",
	"setxattr", "lsetxattr", "removexattr", "lremovexattr", "setxattrat", "removexattrat"}

func seccompRules(network policy.Network, processes, fsNarrowed bool) []Syscall {
	var rules []Syscall
	deny := func(name, why string, args ...ArgCmp) {
		rules = append(rules, Syscall{Name: name, Errno: "EPERM", Args: args, Why: why})
	}
	masked := func(i uint, mask, v uint64) ArgCmp { return ArgCmp{Index: i, Op: CmpMasked, Mask: mask, Value: v} }
	for _, d := range denied {
		deny(d.name, d.why)
	}
	deny("ioctl", "TIOCSTI: type into the terminal", masked(1, mask32, unix.TIOCSTI))
	deny("ioctl", "TIOCLINUX: console control", masked(1, mask32, unix.TIOCLINUX))
	// Querying (0xffffffff) is fine; setting (ADDR_NO_RANDOMIZE,
	// READ_IMPLIES_EXEC, another persona) is not.
	deny("personality", "weaken ASLR or change persona", ArgCmp{Index: 0, Op: CmpNE, Value: mask32})
	for _, f := range namespaceFlags {
		deny("clone", "new namespace: "+f.name, masked(0, f.flag, f.flag))
	}
	// clone3 takes its flags by pointer, out of the filter's reach: ENOSYS
	// makes libc fall back to clone, whose flags the rules above see.
	rules = append(rules, Syscall{Name: "clone3", Errno: "ENOSYS", Why: "flags out of the filter's reach; libc falls back to clone"})
	if fsNarrowed {
		for _, n := range pathMetadata {
			deny(n, "metadata of paths, which Landlock does not cover (use the fd variant)")
		}
	}
	if !processes {
		deny("fork", "processes: false")
		deny("vfork", "processes: false")
		// Test the bit, not glibc's exact flags: Go's runtime and other
		// libcs pass other combinations for threads.
		deny("clone", "processes: false (only threads)", masked(0, unix.CLONE_THREAD, 0))
	}
	switch network {
	case policy.NetworkFull:
	case policy.NetworkTCP:
		for f := uint64(0); f < familyLimit; f++ {
			if f == unix.AF_UNIX || f == unix.AF_INET || f == unix.AF_INET6 {
				continue
			}
			deny("socket", "network: tcp allows unix, inet and inet6 only", masked(0, mask32, f))
		}
		deny("socket", "network: tcp allows unix, inet and inet6 only", ArgCmp{Index: 0, Op: CmpGT, Value: familyLimit - 1})
		for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
			for t := uint64(0); t < 16; t++ {
				if t == unix.SOCK_STREAM {
					continue
				}
				// UDP, raw and SCTP sockets are outside Landlock's TCP
				// port rules (UDP until ABI 10).
				deny("socket", "network: tcp allows stream sockets only", masked(0, mask32, fam), masked(1, 0xf, t))
			}
			// MPTCP (262) and anything but TCP escapes the port rules.
			deny("socket", "network: tcp allows TCP only (no MPTCP)", masked(0, mask32, fam), ArgCmp{Index: 2, Op: CmpGT, Value: unix.IPPROTO_TCP})
			for p := uint64(1); p < unix.IPPROTO_TCP; p++ {
				deny("socket", "network: tcp allows TCP only", masked(0, mask32, fam), masked(2, mask32, p))
			}
		}
		rules = append(rules, socketpairRules()...)
	default: // none
		deny("socket", "network: none (the hub is inherited)")
		rules = append(rules, socketpairRules()...)
	}
	return rules
}

// socketpairRules keep socketpair to AF_UNIX, the one family that has it.
func socketpairRules() []Syscall {
	return []Syscall{
		{Name: "socketpair", Errno: "EPERM", Why: "AF_UNIX only", Args: []ArgCmp{{Index: 0, Op: CmpGT, Value: unix.AF_UNIX}}},
		{Name: "socketpair", Errno: "EPERM", Why: "AF_UNIX only", Args: []ArgCmp{{Index: 0, Op: CmpMasked, Mask: mask32, Value: 0}}},
	}
}
