package jail

import (
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// The seccomp deny list (docs/jail.md, "seccomp"). The filter allows by
// default: it is a list of what no app may do, on top of Landlock's allow
// list of what it may reach. A name the running libseccomp does not know
// is refused by its number (lateSyscalls); one absent on this
// architecture is skipped; and every number above NewestSyscall, which
// this list was not written against, is ENOSYS.

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
// can name. fdMetadata do the same through a descriptor, which an app
// gets for any file it may only read (open O_RDONLY, then fchmod 0666, or
// setuid on a directory: under a root daemon that is local root).
var (
	pathMetadata = [...]string{"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat",
		"setxattr", "lsetxattr", "removexattr", "lremovexattr", "setxattrat", "removexattrat",
		// FS_IOC_FSSETXATTR by path (Linux 6.17); its reading twin,
		// file_getattr, tells what statx's attributes tell.
		"file_setattr"}
	fdMetadata = [...]string{"fchmod", "fchown", "fsetxattr", "fremovexattr"}
	// pathXattrReads read attributes of paths the app cannot open
	// (user.* attributes carry data: a download's origin URL, say).
	pathXattrReads = [...]string{"getxattr", "lgetxattr", "listxattr", "llistxattr", "getxattrat", "listxattrat"}
	// sysvIPC objects are named by a number, not a path: Landlock never
	// sees them, and a jailed app reached every segment, queue and
	// semaphore on the machine (X11's MIT-SHM is the usual user; clients
	// fall back to the socket).
	sysvIPC = [...]string{"shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
		"semget", "semop", "semtimedop", "semctl", "ipc"}
)

// inodeIoctls change a file's attributes through an fd the app may only
// read from; Landlock's ioctl right covers devices only. fs-verity makes
// a file immutable for good.
var inodeIoctls = [...]struct {
	cmd  uint64
	name string
}{
	{unix.FS_IOC_SETFLAGS, "FS_IOC_SETFLAGS"},
	{0x40046602, "FS_IOC32_SETFLAGS"},
	{0x401c5820, "FS_IOC_FSSETXATTR"},
	{0x40087602, "FS_IOC_SETVERSION"},
	{0x40047602, "FS_IOC32_SETVERSION"},
	{unix.FS_IOC_ENABLE_VERITY, "FS_IOC_ENABLE_VERITY"},
	{unix.FS_IOC_SET_ENCRYPTION_POLICY, "FS_IOC_SET_ENCRYPTION_POLICY"},
}

// tmpfileBit is __O_TMPFILE, the bit of O_TMPFILE that is not
// O_DIRECTORY.
const tmpfileBit = unix.O_TMPFILE &^ unix.O_DIRECTORY

// pidfdGetInfo matches PIDFD_GET_INFO (type 0xFF, number 11) whatever the
// size of its struct, which grows: the kernel matches it the same way.
const pidfdGetInfo = 0xff0b

// ruleSet is what decides an app's filter.
type ruleSet struct {
	network    policy.Network
	processes  bool
	fsNarrowed bool // policy jail: Landlock narrows the filesystem
	// bindTCP: the app has tcp_bind ports, so bind and listen go to the
	// daemon (Guard) instead of being refused.
	bindTCP bool
	// unixSockets: Landlock narrows connecting to pathname unix sockets
	// (ABI 9); below it a tcp app may not make unix sockets at all.
	unixSockets bool
	// unixGuard: the daemon decides every connect (Guard.connect): the
	// app has desktop sockets, or network full below ABI 9. Its unix
	// sockets are stream sockets only, whose sendto and sendmsg take no
	// address, so that connect is the one way to name a socket.
	unixGuard bool
}

// ruleTable holds the rules of every ruleSet (96 of them), each built at
// its first use and kept: a start takes its app's instead of building
// ~160 rules, which was a sixth of a start's work in the daemon, and the
// daemon's start does not build the sets no app uses (all 96 were 2.7 ms
// of every octosupd's start, before it could be ready). A set's rules are
// never changed once built.
var ruleTable = func() map[ruleSet]func() []Syscall {
	t := map[ruleSet]func() []Syscall{}
	for _, n := range []policy.Network{policy.NetworkNone, policy.NetworkTCP, policy.NetworkFull} {
		for bits := range 32 {
			rs := ruleSet{network: n, processes: bits&1 != 0, fsNarrowed: bits&2 != 0, bindTCP: bits&4 != 0, unixSockets: bits&8 != 0, unixGuard: bits&16 != 0}
			t[rs] = sync.OnceValue(func() []Syscall { return buildRules(rs) })
		}
	}
	return t
}()

// seccompRules is the filter's rules for rs, a copy the caller owns (the
// rules' Args are shared: do not change them in place).
func seccompRules(rs ruleSet) []Syscall {
	if rs.network != policy.NetworkTCP && rs.network != policy.NetworkFull {
		rs.network = policy.NetworkNone
	}
	return slices.Clone(ruleTable[rs]())
}

// buildRules is the filter's rules for rs, in a fixed order: what every
// app is refused, then what a narrowed filesystem, processes: false and
// the network setting add.
func buildRules(rs ruleSet) []Syscall {
	var r ruleList
	r.always()
	if rs.fsNarrowed {
		r.filesystem()
	}
	if !rs.processes {
		r.noProcesses()
	}
	r.network(rs)
	return r
}

// ruleList is buildRules' list, built step by step.
type ruleList []Syscall

func (r *ruleList) deny(name, why string, args ...ArgCmp) {
	*r = append(*r, Syscall{Name: name, Errno: "EPERM", Args: args, Why: why})
}

func (r *ruleList) notify(name, why string) {
	*r = append(*r, Syscall{Name: name, Notify: true, Why: why})
}

// masked compares argument i under mask with v; ne compares it with v.
func masked(i uint, mask, v uint64) ArgCmp {
	return ArgCmp{Index: i, Op: CmpMasked, Mask: mask, Value: v}
}

func ne(i uint, v uint64) ArgCmp { return ArgCmp{Index: i, Op: CmpNE, Value: v} }

// always: the calls no app makes.
func (r *ruleList) always() {
	deny := r.deny
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
	// The child would be the daemon's, a zombie nobody reaps: enough of
	// them exhaust the user's pids.
	deny("clone", "CLONE_PARENT: a child of the daemon", masked(0, unix.CLONE_PARENT, unix.CLONE_PARENT))
	// clone3 takes its flags by pointer, out of the filter's reach: ENOSYS
	// makes libc fall back to clone, whose flags the rules above see.
	*r = append(*r, Syscall{Name: "clone3", Errno: "ENOSYS", Why: "flags out of the filter's reach; libc falls back to clone"})
	// The parent-death signal is what ends an app whose daemon died; any
	// other signal can be caught or ignored.
	deny("prctl", "PR_SET_PDEATHSIG: only SIGKILL (the app must die with the daemon)",
		masked(0, mask32, unix.PR_SET_PDEATHSIG), ne(1, uint64(unix.SIGKILL)))
	// Calls on another process that neither signals nor ptrace cover,
	// and Landlock's scoping does not see: the same uid may set them on
	// the daemon (its descriptors to zero, its scheduler to idle).
	deny("prlimit64", "set another process's limits", ne(0, 0), ne(2, 0))
	deny("setpriority", "another process's priority", ne(1, 0))
	deny("setpriority", "every process of the user", masked(0, mask32, unix.PRIO_USER))
	for _, n := range []string{"sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"} {
		deny(n, "another process's scheduling (0 is the caller)", ne(0, 0))
	}
	deny("ioprio_set", "another process's io priority (0 is the caller)", ne(1, 0))
	deny("ioprio_set", "every process of the user", masked(0, mask32, 3 /* IOPRIO_WHO_USER */))
	deny("modify_ldt", "x86 segment descriptors: kernel attack surface")
	// pidfd_open takes any pid; the ioctl then tells another process's
	// uid, cgroup and exit status (the daemon's, say), which /proc keeps
	// from a jail app.
	deny("ioctl", "PIDFD_GET_INFO: another process's credentials and cgroup", masked(1, 0xffff, pidfdGetInfo))
}

// filesystem: what a narrowed filesystem adds, the metadata and objects
// Landlock does not cover.
func (r *ruleList) filesystem() {
	deny := r.deny
	for _, n := range pathMetadata {
		deny(n, "metadata of paths, which Landlock does not cover")
	}
	for _, n := range fdMetadata {
		deny(n, "metadata through a descriptor, which a read-only open gives")
	}
	for _, n := range pathXattrReads {
		deny(n, "attributes of paths the app may not open")
	}
	for _, c := range inodeIoctls {
		deny("ioctl", c.name+": inode attributes through a read-only descriptor", masked(1, mask32, c.cmd))
	}
	for _, b := range []uint64{unix.S_ISUID, unix.S_ISGID} {
		bit := "setuid"
		if b == unix.S_ISGID {
			bit = "setgid"
		}
		// The mode counts only when the call creates (O_CREAT, or
		// O_TMPFILE's own bit): the kernel ignores it otherwise, and
		// open("/etc/hostname", O_RDONLY, 04000) was refused.
		for _, creates := range []uint64{unix.O_CREAT, tmpfileBit} {
			deny("open", "create "+bit+" files", masked(2, b, b), masked(1, creates, creates))
			deny("openat", "create "+bit+" files", masked(3, b, b), masked(2, creates, creates))
		}
		deny("creat", "create "+bit+" files", masked(1, b, b))
		deny("mkdir", "create "+bit+" directories", masked(1, b, b))
		deny("mkdirat", "create "+bit+" directories", masked(2, b, b))
		deny("mknod", "create "+bit+" nodes", masked(1, b, b))
		deny("mknodat", "create "+bit+" nodes", masked(2, b, b))
	}
	// Its mode is in a struct, out of the filter's reach; libc and
	// Go open with openat.
	*r = append(*r, Syscall{Name: "openat2", Errno: "ENOSYS", Why: "its mode is out of the filter's reach; callers fall back to openat"})
	for _, n := range sysvIPC {
		deny(n, "SysV IPC: objects by number, outside Landlock")
	}
	r.notify("inotify_add_watch", "the daemon checks the path against the grants")
	// Every process of a jail app stays in the session the app was
	// started in, which is how the daemon finds them all, however they
	// forked and whoever's child they are now (docs/jail.md, "The app's
	// processes").
	deny("setsid", "stay in the app's session, by which the daemon finds its processes")
}

// noProcesses: processes: false, threads only.
func (r *ruleList) noProcesses() {
	deny := r.deny
	deny("fork", "processes: false")
	deny("vfork", "processes: false")
	// Test the bit, not glibc's exact flags: Go's runtime and other
	// libcs pass other combinations for threads.
	deny("clone", "processes: false (only threads)", masked(0, unix.CLONE_THREAD, 0))
	// execve is the gate's (Spec.ExecOnce); execveat has no first
	// call to let through.
	deny("execveat", "processes: false")
}

// network: what the network setting refuses (none by default).
func (r *ruleList) network(rs ruleSet) {
	deny, notify := r.deny, r.notify
	if rs.network != policy.NetworkFull {
		// Fast Open connects from sendto/sendmsg, where Landlock's
		// connect rule does not look.
		deny("sendto", "MSG_FASTOPEN: a connect Landlock does not see", masked(3, unix.MSG_FASTOPEN, unix.MSG_FASTOPEN))
		deny("sendmsg", "MSG_FASTOPEN: a connect Landlock does not see", masked(2, unix.MSG_FASTOPEN, unix.MSG_FASTOPEN))
		deny("sendmmsg", "MSG_FASTOPEN: a connect Landlock does not see", masked(3, unix.MSG_FASTOPEN, unix.MSG_FASTOPEN))
	}
	if rs.unixGuard {
		r.unixGuard(rs)
	}
	switch rs.network {
	case policy.NetworkFull:
		if rs.unixGuard {
			// The guard decides the connects; a datagram pair's sendto
			// names any pathname socket without one (/dev/log, the
			// journal, another app's).
			*r = append(*r, socketpairRules()...)
		}
	case policy.NetworkTCP:
		for f := uint64(0); f < familyLimit; f++ {
			if f == unix.AF_INET || f == unix.AF_INET6 || f == unix.AF_UNIX && (rs.unixSockets || rs.unixGuard) {
				continue
			}
			why := "network: tcp allows inet and inet6 only"
			if f == unix.AF_UNIX {
				why = "unix sockets: Landlock narrows their connect only from ABI 9"
			}
			deny("socket", why, masked(0, mask32, f))
		}
		deny("socket", "network: tcp allows inet and inet6 only", ArgCmp{Index: 0, Op: CmpGT, Value: familyLimit - 1})
		for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
			// UDP, raw and SCTP sockets are outside Landlock's TCP port
			// rules (UDP until ABI 10).
			for _, t := range notStream {
				deny("socket", "network: tcp allows stream sockets only", masked(0, mask32, fam), t)
			}
			// MPTCP (262) and anything but TCP escapes the port rules.
			deny("socket", "network: tcp allows TCP only (no MPTCP)", masked(0, mask32, fam), ArgCmp{Index: 2, Op: CmpGT, Value: unix.IPPROTO_TCP})
			for p := uint64(1); p < unix.IPPROTO_TCP; p++ {
				deny("socket", "network: tcp allows TCP only", masked(0, mask32, fam), masked(2, mask32, p))
			}
		}
		if rs.bindTCP {
			// listen() binds an unbound socket to an ephemeral port, and
			// bind() names unix sockets too (an abstract name squats a
			// host service's): the daemon checks the socket and the port
			// and does the call itself, on the same socket.
			notify("bind", "the daemon binds only tcp_bind ports")
			notify("listen", "the daemon lets only a socket bound to a tcp_bind port listen")
		} else {
			deny("bind", "no tcp_bind (an abstract name would squat a host service's)")
			deny("listen", "no tcp_bind (listen binds an ephemeral port itself)")
		}
		*r = append(*r, socketpairRules()...)
	default: // none
		if rs.unixGuard {
			// Unix stream sockets for the granted ones (unixGuard
			// refuses the other types); no other family.
			deny("socket", "network: none (unix stream sockets for the granted ones only)", ArgCmp{Index: 0, Op: CmpGT, Value: unix.AF_UNIX})
			deny("socket", "network: none (unix stream sockets for the granted ones only)", masked(0, mask32, 0))
		} else {
			deny("socket", "network: none (the hub is inherited)")
			deny("connect", "network: none")
		}
		deny("bind", "network: none (an abstract name would squat a host service's)")
		deny("listen", "network: none")
		*r = append(*r, socketpairRules()...)
	}
}

// unixGuard: unix sockets are stream sockets, and the daemon makes every
// connect (granted sockets only; docs/jail.md, "Desktop sockets and
// devices"). A datagram or seqpacket socket's sendto/sendmsg names any
// socket, which a filter cannot read; a stream socket's takes no address
// (EISCONN, EOPNOTSUPP).
func (r *ruleList) unixGuard(rs ruleSet) {
	for _, t := range notStream {
		r.deny("socket", "unix sockets: stream only (a datagram's sendto names any socket)", masked(0, mask32, unix.AF_UNIX), t)
	}
	r.notify("connect", "the daemon connects only to the granted sockets")
}

// socketpairRules keep socketpair to AF_UNIX stream pairs: a datagram
// pair reaches any pathname socket with sendto (a desktop's /dev/log),
// and disconnected it takes a name.
func socketpairRules() []Syscall {
	rules := []Syscall{
		{Name: "socketpair", Errno: "EPERM", Why: "AF_UNIX only", Args: []ArgCmp{{Index: 0, Op: CmpGT, Value: unix.AF_UNIX}}},
		{Name: "socketpair", Errno: "EPERM", Why: "AF_UNIX only", Args: []ArgCmp{{Index: 0, Op: CmpMasked, Mask: mask32, Value: 0}}},
	}
	for _, t := range notStream {
		rules = append(rules, Syscall{Name: "socketpair", Errno: "EPERM", Why: "stream pairs only (a datagram pair reaches host sockets)", Args: []ArgCmp{t}})
	}
	return rules
}

// notStream matches every socket type but SOCK_STREAM (1) in argument 1's
// low four bits (the rest are SOCK_NONBLOCK and SOCK_CLOEXEC): 0, or any
// of bits 1-3 set. Four compares instead of fifteen keep the filter, and
// what the kernel runs at its load, short.
var notStream = [...]ArgCmp{
	{Index: 1, Op: CmpMasked, Mask: 0xf, Value: 0},
	{Index: 1, Op: CmpMasked, Mask: 0x2, Value: 0x2},
	{Index: 1, Op: CmpMasked, Mask: 0x4, Value: 0x4},
	{Index: 1, Op: CmpMasked, Mask: 0x8, Value: 0x8},
}
