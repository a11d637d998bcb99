package jail

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// The hostile app's world: what an adversarial review reached from
// inside the jail beyond the first escape suite, each object made by
// "the daemon" (this test process), outside every jail.
type hostileWorld struct {
	dgram  string // a datagram socket outside (a desktop's /dev/log)
	squat  string // an abstract name a host service would take
	shm    int    // a 0600 SysV segment, a message queue and a semaphore
	msg    int
	sem    int
	mq     string // a POSIX message queue
	interp string // the probe's ELF interpreter
	// oomScoreAdj is the daemon's, written back unchanged by the attempt.
	oomScoreAdj string
	// groupmate leads a process group of the daemon's session: the
	// stand-in for the daemon's own group, which an attack that gets in
	// renices (nice 19) and idles.
	groupmate int
}

func newHostileWorld(t *testing.T, h *harness) *hostileWorld {
	t.Helper()
	hw := &hostileWorld{squat: fmt.Sprintf("@octosup-squat-%d", os.Getpid())}
	hw.dgram = filepath.Join(h.dirs.Runtime, "log.sock")
	dl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: hw.dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close() })

	if hw.shm, err = unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(hw.shm, unix.IPC_RMID, nil) })
	id, _, e := unix.Syscall(unix.SYS_MSGGET, unix.IPC_PRIVATE, unix.IPC_CREAT|0o600, 0)
	if e != 0 {
		t.Fatal(e)
	}
	hw.msg = int(id)
	t.Cleanup(func() { unix.Syscall(unix.SYS_MSGCTL, uintptr(hw.msg), unix.IPC_RMID, 0) })
	m := struct {
		typ  int64
		text [8]byte
	}{1, [8]byte{'s', 'e', 'c', 'r', 'e', 't'}}
	if _, _, e := unix.Syscall6(unix.SYS_MSGSND, uintptr(hw.msg), uintptr(unsafe.Pointer(&m)), 8, unix.IPC_NOWAIT, 0, 0); e != 0 {
		t.Fatal(e)
	}
	if id, _, e = unix.Syscall(unix.SYS_SEMGET, unix.IPC_PRIVATE, 1, unix.IPC_CREAT|0o600); e != 0 {
		t.Fatal(e)
	}
	hw.sem = int(id)
	t.Cleanup(func() { unix.Syscall6(unix.SYS_SEMCTL, uintptr(hw.sem), 0, unix.IPC_RMID, 0, 0, 0) })

	// The kernel takes the name without the leading slash glibc wants.
	hw.mq = fmt.Sprintf("octosup-test-%d", os.Getpid())
	name, _ := unix.BytePtrFromString(hw.mq)
	fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(name)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600, 0, 0, 0)
	if e != 0 {
		t.Fatal(e)
	}
	unix.Close(int(fd))
	t.Cleanup(func() { unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(name)), 0, 0) })

	in, err := interpreters(h.probe)
	if err != nil || len(in) == 0 {
		t.Fatalf("the probe's ELF interpreter: %v %v", in, err)
	}
	hw.interp = in[0]
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	hw.oomScoreAdj = strings.TrimSpace(string(b))
	mate := exec.Command("/bin/sleep", "600")
	mate.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := mate.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mate.Process.Kill(); mate.Wait() })
	hw.groupmate = mate.Process.Pid
	return hw
}

// hostileCases are the adversarial review's ways out, and their
// neighbours, as escape cases: each attack next to the positive control
// that shows the same action works where it is allowed.
func hostileCases(h *harness, w *world, hw *hostileWorld) []escapeCase {
	jail := h.dirs.JailDir("probe")
	d := strconv.Itoa(w.daemon)
	tcp := strconv.Itoa(w.tcpPort)
	free := strconv.Itoa(w.freePort)
	ungranted := withTCP([]uint16{uint16(w.tcpPort) + 1}, nil)
	granted := withTCP([]uint16{uint16(w.tcpPort)}, nil)
	bindFree := withTCP([]uint16{uint16(w.freePort)}, []uint16{uint16(w.freePort)})
	roDir := filepath.Dir(w.roExternal)
	mate := strconv.Itoa(hw.groupmate)
	return []escapeCase{
		// 1. Unix sockets with network tcp, below the Landlock ABI that
		// narrows pathname connect: the control socket, the session bus.
		{name: "unix socket with network tcp", attempt: jailed(withTCP(nil, nil), "unix_connect", w.controlSocket), refused: []string{"EPERM"},
			// Outside the jail: a jail app with network full no longer
			// reaches an ungranted unix socket either (the guard decides).
			control: plain("unix_connect", w.controlSocket), allowed: "ok"},
		{name: "unix socket for a tcp app", attempt: jailed(granted, "unix_socket"), refused: []string{"EPERM"},
			control: jailed(granted, "socketpair"), allowed: "ok"},

		// 2. TCP Fast Open connects without connect().
		{name: "fast open sendto to a port not granted", attempt: jailed(ungranted, "tfo_sendto", tcp), refused: []string{"EPERM"},
			control: plain("tfo_sendto", tcp), allowed: "ok"},
		{name: "fast open sendmsg to a port not granted", attempt: jailed(ungranted, "tfo_sendmsg", tcp), refused: []string{"EPERM"},
			control: plain("tfo_sendmsg", tcp), allowed: "ok"},
		{name: "fast open sendmmsg to a port not granted", attempt: jailed(ungranted, "tfo_sendmmsg", tcp), refused: []string{"EPERM"},
			control: plain("tfo_sendmmsg", tcp), allowed: "ok"},
		{name: "fast open connect to a port not granted", attempt: jailed(ungranted, "tfo_connect", tcp), refused: []string{"EACCES", "EPERM"},
			control: jailed(granted, "tfo_connect", tcp), allowed: "ok"},

		// 3. listen() binds an ephemeral port by itself.
		{name: "listen unbound without tcp_bind", attempt: jailed(withTCP(nil, nil), "tcp_listen"), refused: []string{"EPERM"},
			control: plain("tcp_listen"), allowed: "ok"},
		{name: "listen unbound with tcp_bind", attempt: jailed(bindFree, "tcp_listen"), refused: []string{"EACCES"},
			control: jailed(bindFree, "tcp_bind_listen", free), allowed: "ok"},
		// The kernel itself refuses this one (EINVAL), the guard first.
		{name: "listen on the port a failed connect took", attempt: jailed(bindFree, "connect_listen", free), refused: []string{"EACCES", "EINVAL"},
			control: jailed(bindFree, "tcp_bind_listen", free), allowed: "ok"},
		{name: "listen from a thread, with tcp_bind", attempt: jailed(bindFree, "thread_bind_listen", tcp), refused: []string{"EACCES"},
			control: jailed(bindFree, "thread_bind_listen", free), allowed: "ok"},
		{name: "tcp bind a port not granted, with tcp_bind", attempt: jailed(bindFree, "tcp_bind", tcp), refused: []string{"EACCES"},
			control: jailed(bindFree, "tcp_bind", free), allowed: "ok"},
		{name: "bind an abstract name with tcp_bind", attempt: jailed(bindFree, "stream_squat", hw.squat+"-b"), refused: []string{"EPERM"},
			control: plain("stream_squat", hw.squat+"-b"), allowed: "ok"},

		// 4. Datagram socketpairs reach host sockets; any socket can take
		// an abstract name.
		{name: "datagram to a host socket with network none", attempt: jailed(asIs, "dgram_sendto", hw.dgram), refused: []string{"EPERM"},
			control: plain("dgram_sendto", hw.dgram), allowed: "ok"},
		{name: "datagram to a host socket with network tcp", attempt: jailed(granted, "dgram_sendto", hw.dgram), refused: []string{"EPERM"},
			control: plain("dgram_sendto", hw.dgram), allowed: "ok"},
		{name: "squat an abstract name with a datagram pair", attempt: jailed(asIs, "dgram_squat", hw.squat), refused: []string{"EPERM"},
			control: plain("dgram_squat", hw.squat), allowed: "ok"},
		{name: "squat an abstract name with a stream pair", attempt: jailed(asIs, "stream_squat", hw.squat), refused: []string{"EPERM"},
			control: plain("stream_squat", hw.squat), allowed: "ok"},
		{name: "squat an abstract name with network tcp", attempt: jailed(granted, "stream_squat", hw.squat), refused: []string{"EPERM"},
			control: plain("stream_squat", hw.squat), allowed: "ok"},
		{name: "seqpacket pair with network none", attempt: jailed(asIs, "seqpacket_pair"), refused: []string{"EPERM"},
			control: plain("seqpacket_pair"), allowed: "ok"},

		// 5. Metadata through descriptors, and setuid bits at creation.
		{name: "fchmod a read-only file", attempt: jailed(asIs, "fchmod_ro", w.roExternal, "666"), refused: []string{"EPERM"},
			control: plain("fchmod_ro", w.roExternal, "644"), allowed: "ok"},
		{name: "fchmod setuid on a read-only dir", attempt: jailed(asIs, "fchmod_ro", roDir, "4777"), refused: []string{"EPERM"},
			control: plain("fchmod_ro", roDir, "755"), allowed: "ok"},
		{name: "fchmod in the jail", attempt: jailed(asIs, "fchmod", filepath.Join(jail, "new")), refused: []string{"EPERM"},
			control: jailed(asIs, "write", filepath.Join(jail, "new")), allowed: "ok"},
		{name: "fchown a read-only file", attempt: jailed(asIs, "fchown_ro", w.roExternal), refused: []string{"EPERM"},
			control: plain("fchown_ro", w.roExternal), allowed: "ok"},
		{name: "fsetxattr a read-only file", attempt: jailed(asIs, "fsetxattr_ro", w.roExternal), refused: []string{"EPERM"},
			control: plain("fsetxattr_ro", w.roExternal), allowed: "ok"},
		{name: "fremovexattr a read-only file", attempt: jailed(asIs, "fremovexattr_ro", w.roExternal), refused: []string{"EPERM"},
			control: plain("fremovexattr_ro", w.roExternal), allowed: "!EPERM"},
		// Linux 6.13's *at xattr calls and 6.17's file_setattr, which
		// this libseccomp does not name: the filter let them through,
		// and setxattrat wrote an ACL (chmod 0666) on a file outside
		// every grant.
		{name: "setxattrat a file outside", attempt: jailed(asIs, "setxattrat", w.homeFile), refused: []string{"EPERM"},
			control: plain("setxattrat", w.homeFile), allowed: "ok"},
		{name: "removexattrat a file outside", attempt: jailed(asIs, "removexattrat", w.homeFile), refused: []string{"EPERM"},
			control: plain("removexattrat", w.homeFile), allowed: "ok"},
		{name: "getxattrat a file outside", attempt: jailed(asIs, "getxattrat", w.homeFile), refused: []string{"EPERM"},
			control: plain("getxattrat", w.homeFile), allowed: "ok"},
		{name: "listxattrat a file outside", attempt: jailed(asIs, "listxattrat", w.homeFile), refused: []string{"EPERM"},
			control: plain("listxattrat", w.homeFile), allowed: "ok"},
		{name: "file_setattr a file outside", attempt: jailed(asIs, "file_setattr", w.homeFile), refused: []string{"EPERM"},
			control: plain("file_setattr", w.homeFile), allowed: "ok"},
		{name: "read xattrs outside", attempt: jailed(asIs, "getxattr", w.homeFile), refused: []string{"EPERM"},
			control: plain("getxattr", w.homeFile), allowed: "ok"},
		{name: "list xattrs outside", attempt: jailed(asIs, "listxattr", w.homeFile), refused: []string{"EPERM"},
			control: plain("listxattr", w.homeFile), allowed: "ok"},
		{name: "create a setuid file", attempt: jailed(asIs, "creat_mode", filepath.Join(jail, "suid"), "4755"), refused: []string{"EPERM"},
			control: jailed(asIs, "creat_mode", filepath.Join(jail, "plain"), "755"), allowed: "ok"},
		{name: "create a setgid file", attempt: jailed(asIs, "creat_mode", filepath.Join(jail, "sgid"), "2755"), refused: []string{"EPERM"},
			control: jailed(asIs, "creat_mode", filepath.Join(jail, "plain2"), "644"), allowed: "ok"},
		{name: "mkdir setgid", attempt: jailed(asIs, "mkdir_mode", filepath.Join(jail, "sgid.d"), "2755"), refused: []string{"EPERM"},
			control: jailed(asIs, "mkdir_mode", filepath.Join(jail, "plain.d"), "755"), allowed: "ok"},
		{name: "mknod setuid", attempt: jailed(asIs, "mknod_mode", filepath.Join(jail, "suid.n"), "4755"), refused: []string{"EPERM"},
			control: jailed(asIs, "mknod_mode", filepath.Join(jail, "plain.n"), "644"), allowed: "ok"},
		{name: "openat2", attempt: jailed(asIs, "openat2", "/etc/hostname"), refused: []string{"ENOSYS"},
			control: plain("openat2", "/etc/hostname"), allowed: "ok"},
		{name: "set inode flags on a read-only file", attempt: jailed(asIs, "setflags_ro", w.roExternal), refused: []string{"EPERM"},
			control: plain("setflags_ro", w.roExternal), allowed: "!EPERM"},
		{name: "fs-verity on a read-only file", attempt: jailed(asIs, "verity_ro", w.roExternal), refused: []string{"EPERM"},
			control: plain("verity_ro", w.roExternal), allowed: "!EPERM"},

		// 6. processes: false executes nothing after its own exec.
		{name: "exec a memfd", attempt: jailed(asIs, "memfd_exec"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "memfd_exec"), allowed: "ok"},
		{name: "exec a memfd through /proc/self/fd", attempt: jailed(asIs, "memfd_exec_proc"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "memfd_exec_proc"), allowed: "ok"},
		{name: "run a program through the ELF interpreter", attempt: jailed(asIs, "interp_exec", hw.interp), refused: []string{"EPERM"},
			control: jailed(withProcesses, "interp_exec", hw.interp), allowed: "ok"},
		{name: "exec itself again", attempt: jailed(asIs, "reexec"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "reexec"), allowed: "ok"},
		{name: "execveat", attempt: jailed(asIs, "execveat_self"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "execveat_self"), allowed: "ok"},

		// 9. The daemon's own /proc entry.
		{name: "read the daemon's mounts", attempt: jailed(asIs, "read", "/proc/"+d+"/mounts"), refused: []string{"EACCES"},
			control: plain("read", "/proc/"+d+"/mounts"), allowed: "ok"},

		// 8's neighbour: a broad app reads all of /proc, and would write
		// the daemon's entries (oom_score_adj to 1000 makes the daemon the
		// OOM killer's first pick). Its own entry stays writable.
		{name: "broad writes the daemon's oom_score_adj", attempt: jailed(withBroad, "write_file", "/proc/"+d+"/oom_score_adj", hw.oomScoreAdj), refused: []string{"EACCES"},
			control: jailed(withBroad, "write_file", "/proc/self/oom_score_adj", "1000"), allowed: "ok"},

		// 10, 11. Zombies of the daemon; clearing the parent-death signal.
		{name: "clone with CLONE_PARENT", attempt: jailed(withProcesses, "clone_parent", "parent"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "clone_parent", "child"), allowed: "ok"},
		{name: "clear the parent-death signal", attempt: jailed(asIs, "pdeathsig", "0"), refused: []string{"EPERM"},
			control: jailed(asIs, "pdeathsig", "9"), allowed: "ok"},
		{name: "soften the parent-death signal", attempt: jailed(asIs, "pdeathsig", "15"), refused: []string{"EPERM"},
			control: jailed(asIs, "pdeathsig", "9"), allowed: "ok"},

		// Neighbours: what reaches the daemon without a signal or ptrace.
		{name: "prlimit the daemon", attempt: jailed(asIs, "prlimit", d), refused: []string{"EPERM"},
			control: plain("prlimit", d), allowed: "ok"},
		{name: "renice the daemon", attempt: jailed(asIs, "setpriority", d), refused: []string{"EPERM"},
			control: plain("setpriority", d), allowed: "ok"},
		{name: "renice every process of the user", attempt: jailed(asIs, "setpriority_user"), refused: []string{"EPERM"},
			control: jailed(asIs, "setpriority", "0"), allowed: "ok"},
		{name: "pin the daemon to a cpu", attempt: jailed(asIs, "setaffinity", d), refused: []string{"EPERM"},
			control: plain("setaffinity", d), allowed: "ok"},
		{name: "change the daemon's scheduler", attempt: jailed(asIs, "setscheduler", d), refused: []string{"EPERM"},
			control: plain("setscheduler", d), allowed: "ok"},
		{name: "change the daemon's io priority", attempt: jailed(asIs, "ioprio", d), refused: []string{"EPERM"},
			control: plain("ioprio", d), allowed: "ok"},
		{name: "modify_ldt", attempt: jailed(asIs, "modify_ldt"), refused: []string{"EPERM"},
			control: plain("modify_ldt"), allowed: "ok"},

		// Process groups and sessions: an app in the daemon's session
		// joined the daemon's group, reniced it and idled its I/O (who 0
		// is "the caller's group"), and escaped its own group's signals.
		{name: "join the daemon's process group", attempt: jailed(asIs, "join_pgrp", d), refused: []string{"EPERM"},
			control: plain("join_pgrp", d), allowed: "ok"},
		{name: "renice a process group of the daemon's session", attempt: jailed(asIs, "pgrp_prio", mate), refused: []string{"EPERM"},
			control: plain("pgrp_prio", mate), allowed: "ok"},
		{name: "idle a process group of the daemon's session", attempt: jailed(asIs, "pgrp_ioprio", mate), refused: []string{"EPERM"},
			control: plain("pgrp_ioprio", mate), allowed: "ok"},
		{name: "io priority of the daemon's group by its id", attempt: jailed(asIs, "ioprio_group", d), refused: []string{"EPERM"},
			control: plain("ioprio_group", mate), allowed: "ok"},
		// The control must not set every process of the user's: its own.
		{name: "io priority of every process of the user", attempt: jailed(asIs, "ioprio_user"), refused: []string{"EPERM"},
			control: jailed(asIs, "ioprio", "0"), allowed: "ok"},
		{name: "signal the daemon's process group", attempt: jailed(asIs, "kill_group", d), refused: []string{"EPERM"},
			control: plain("kill_group", d), allowed: "ok"},
		{name: "the app leads a session of its own", attempt: jailed(asIs, "kill_own_group"), refused: []string{"ok"},
			control: jailed(asIs, "session"), allowed: "own=true"},
		{name: "a jail app's child leaves its session", attempt: jailed(withProcesses, "setsid_child"), refused: []string{"EPERM"},
			control: jailed(func(a *policy.App) { withProcesses(a); withBroad(a) }, "setsid_child"), allowed: "ok"},
		{name: "pidfd info of the daemon", attempt: jailed(asIs, "pidfd_info", d), refused: []string{"EPERM"},
			control: plain("pidfd_info", d), allowed: "ok"},
		// The setuid rule looks at the mode only when the call creates:
		// the kernel ignores it otherwise (a false refusal before).
		{name: "create setuid with open and openat", attempt: jailed(asIs, "open_flags_mode", filepath.Join(jail, "suid.o"), "O_CREAT", "4755"), refused: []string{"EPERM"},
			control: jailed(asIs, "open_flags_mode", "/etc/hostname", "O_RDONLY", "4000"), allowed: "ok"},
		{name: "create setgid with O_TMPFILE", attempt: jailed(asIs, "open_flags_mode", jail, "O_TMPFILE", "2755"), refused: []string{"EPERM"},
			control: jailed(asIs, "open_flags_mode", jail, "O_TMPFILE", "0644"), allowed: "ok"},

		// 15. SysV IPC and its POSIX neighbour.
		{name: "attach an outside shm segment", attempt: jailed(asIs, "shm_attach", strconv.Itoa(hw.shm)), refused: []string{"EPERM"},
			control: plain("shm_attach", strconv.Itoa(hw.shm)), allowed: "ok"},
		{name: "list shm segments", attempt: jailed(asIs, "shm_list"), refused: []string{"EPERM"},
			control: plain("shm_list"), allowed: "ok"},
		{name: "take an outside queue's message", attempt: jailed(asIs, "msg_recv", strconv.Itoa(hw.msg)), refused: []string{"EPERM"},
			control: plain("msg_recv", strconv.Itoa(hw.msg)), allowed: "ok"},
		{name: "change an outside semaphore", attempt: jailed(asIs, "sem_op", strconv.Itoa(hw.sem)), refused: []string{"EPERM"},
			control: plain("sem_op", strconv.Itoa(hw.sem)), allowed: "ok"},
		// Landlock sees mq_open's open of the queue's inode (EACCES).
		{name: "open an outside POSIX queue", attempt: jailed(asIs, "mq_open", hw.mq), refused: []string{"EACCES", "EPERM"},
			control: plain("mq_open", hw.mq), allowed: "ok"},

		// 16. inotify outside the grants.
		{name: "watch an outside directory", attempt: jailed(asIs, "inotify", w.outsideDir), refused: []string{"EACCES"},
			control: jailed(asIs, "inotify", jail), allowed: "ok"},
		{name: "watch a file in the home", attempt: jailed(asIs, "inotify", w.homeFile), refused: []string{"EACCES"},
			control: jailed(asIs, "inotify", w.roExternal), allowed: "ok"},
		{name: "watch outside by a relative path", attempt: jailed(asIs, "inotify", "../../.."), refused: []string{"EACCES"},
			control: jailed(asIs, "inotify", "."), allowed: "ok"},
		{name: "watch through /proc/self", attempt: jailed(asIs, "inotify", "/proc/self/cwd/../other"), refused: []string{"EACCES"},
			control: jailed(asIs, "inotify", "/usr"), allowed: "ok"},

		// 17. A root daemon's app is uid 0, the owner of /etc/shadow:
		// /etc was granted whole, and the owner's read bit let it read
		// the password hashes. Now /etc is granted as what every user
		// may read there. (As nobody the file's mode refuses it anyway.)
		{name: "read the password hashes", attempt: jailed(asIs, "read", "/etc/shadow"), refused: []string{"EACCES"},
			control: plain("read", "/etc/shadow"), allowed: "ok", privileged: true},
		{name: "read the group password hashes", attempt: jailed(asIs, "read", "/etc/gshadow"), refused: []string{"EACCES"},
			control: jailed(asIs, "read", "/etc/passwd"), allowed: "ok"},
		{name: "list the names in etc", attempt: jailed(asIs, "read", "/etc/shadow-"), refused: []string{"EACCES", "ENOENT"},
			control: jailed(asIs, "ls", "/etc"), allowed: "ok"},
	}
}
