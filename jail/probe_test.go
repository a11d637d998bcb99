package jail

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The probe is this test binary re-executed as a jailed app (argv[1] ==
// probeArg): it performs one action and prints its outcome, "ok" or the
// errno's name, on stdout. Raw syscalls, so that the errno is the kernel's
// (or the filter's) and no library retries around it.

const probeArg = "__octosup_jail_probe"

// init keeps a probe's main goroutine on the main thread, the one that
// exec'd: the parent-death signal is a setting of that thread alone (the
// threads the Go runtime starts after exec have none), and
// PR_GET_PDEATHSIG reads the calling thread's. A main goroutine left to
// roam moves to another thread after a blocking call now and then: 10 of
// 300 status probes said Pdeathsig=0, more under load.
func init() {
	if len(os.Args) >= 2 && os.Args[1] == probeArg {
		runtime.LockOSThread()
	}
}

func runProbe(args []string) int {
	if len(args) == 0 {
		fmt.Println("usage: probe ACTION [ARGS]")
		return 2
	}
	out, err := probe(args[0], args[1:])
	switch {
	case err != nil:
		if name := errnoOf(err); name != "" {
			fmt.Println(name)
		} else {
			fmt.Println("error:", err)
		}
	case out != "":
		fmt.Println(out)
	default:
		fmt.Println("ok")
	}
	return 0
}

// errnoOf names the errno inside err ("" when there is none).
func errnoOf(err error) string { return layerErr("", "", err).Errno }

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func probe(action string, a []string) (string, error) {
	switch action {
	case "read":
		_, err := os.ReadFile(a[0])
		return "", err
	case "ls":
		_, err := os.ReadDir(a[0])
		return "", err
	case "cat":
		b, err := os.ReadFile(a[0])
		return string(b), err
	case "open":
		fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "chmod":
		return "", unix.Fchmodat(unix.AT_FDCWD, a[0], 0o644, 0)
	case "fchmod":
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Fchmod(fd, 0o640)
	case "write":
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "truncate":
		return "", unix.Truncate(a[0], 0)
	case "open_trunc":
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "link":
		return "", unix.Link(a[0], a[1])
	case "symlink":
		return "", unix.Symlink(a[0], a[1])
	case "replace":
		// Create a0, then rename it over a1.
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return "", err
		}
		unix.Close(fd)
		return "", unix.Rename(a[0], a[1])
	case "rename":
		return "", unix.Rename(a[0], a[1])
	case "exec":
		// Replaces the probe: on success the program prints "ok" itself.
		return "", unix.Exec(a[0], a[1:], nil)
	case "fork":
		return rawFork(unix.SYS_FORK, 0)
	case "clone_process":
		return rawFork(unix.SYS_CLONE, uintptr(unix.SIGCHLD))
	case "clone3":
		return clone3()
	case "threads":
		return "", threads()
	case "tcp_connect":
		return "", inetConnect(unix.SOCK_STREAM, 0, atoi(a[0]))
	case "tcp_bind":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Bind(fd, &unix.SockaddrInet4{Port: atoi(a[0]), Addr: [4]byte{127, 0, 0, 1}})
	case "udp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "mptcp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "vsock":
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "netlink":
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "unix_connect":
		return "", unixConnect(a[0])
	case "pulse_raw":
		return pulseRaw(a[0], atoi(a[1]), a[2])
	case "pulse_streams":
		return pulseStreams(atoi(a[0]), a[1])
	case "pulse_plays":
		return pulsePlays(atoi(a[0]), a[1])
	case "pulse_remove":
		return pulseRemove(atoi(a[0]), a[1])
	case "pulse_uploads":
		mode := ""
		if len(a) > 3 {
			mode = a[3]
		}
		return pulseUploads(atoi(a[0]), atoi(a[1]), a[2], mode)
	case "unix_connect_n":
		// a[0] connects to a[1] at once, held open: the first refusal.
		n, err := strconv.Atoi(a[0])
		if err != nil {
			return "", err
		}
		for range n {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: a[1]}); err != nil {
				return "", err
			}
		}
		return "", nil
	case "abstract_self":
		// Listen on an abstract name inside the jail and connect to it:
		// the jail's own abstract sockets stay usable.
		name := "@octosup-probe-" + strconv.Itoa(os.Getpid())
		l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(l)
		if err := unix.Bind(l, &unix.SockaddrUnix{Name: name}); err != nil {
			return "", err
		}
		if err := unix.Listen(l, 1); err != nil {
			return "", err
		}
		return "", unixConnect(name)
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return "", err
	case "kill":
		return "", unix.Kill(atoi(a[0]), 0)
	case "ptrace_attach":
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(atoi(a[0])), 0, 0, 0, 0)
		return "", errOrNil(e)
	case "ptrace_seize":
		// Like attach but without stopping the target: the control run
		// must not freeze the test process.
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(atoi(a[0])), 0, 0, 0, 0)
		return "", errOrNil(e)
	case "vm_readv":
		addr, err := strconv.ParseUint(a[1], 0, 64)
		if err != nil {
			return "", err
		}
		buf := make([]byte, 8)
		local := []unix.Iovec{{Base: &buf[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: 8}}
		_, err = unix.ProcessVMReadv(atoi(a[0]), local, remote, 0)
		return "", err
	case "bpf":
		attr := struct{ typ, keySize, valueSize, maxEntries uint32 }{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1}
		fd, _, e := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if e == 0 {
			unix.Close(int(fd))
		}
		return "", errOrNil(e)
	case "userfaultfd":
		const uffdUserModeOnly = 1
		fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return "", errOrNil(e)
	case "unshare_user":
		return "", unix.Unshare(unix.CLONE_NEWUSER)
	case "mount":
		err := unix.Mount("none", a[0], "tmpfs", 0, "")
		if err == nil {
			unix.Unmount(a[0], 0)
		}
		return "", err
	case "keyctl":
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
		return "", err
	case "io_uring":
		var params [120]byte
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return "", errOrNil(e)
	case "perf":
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "tiocsti", "tiocgwinsz":
		// The pty comes over the hub (fd 3), as SCM_RIGHTS: the jail
		// itself opens no terminal.
		fd, err := recvFD(HubFD)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if action == "tiocgwinsz" {
			_, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
			return "", err
		}
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		return "", errOrNil(e)
	case "personality":
		n, err := strconv.ParseUint(a[0], 0, 32)
		if err != nil {
			return "", err
		}
		_, _, e := unix.Syscall(unix.SYS_PERSONALITY, uintptr(n), 0, 0)
		return "", errOrNil(e)
	case "fds":
		// Raw calls: os.ReadDir would start the runtime's poller, whose
		// own fds would show up in the list.
		dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(dir)
		buf := make([]byte, 4096)
		var names []string
		for {
			n, err := unix.Getdents(dir, buf)
			if err != nil {
				return "", err
			}
			if n == 0 {
				break
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names)
		}
		var fds []int
		for _, name := range names {
			if fd := atoi(name); fd != dir {
				fds = append(fds, fd)
			}
		}
		slices.Sort(fds)
		return fmt.Sprint(fds), nil
	case "status":
		// The kernel's word on no_new_privs, seccomp and capabilities.
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return "", err
		}
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if slices.Contains([]string{"NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, k) {
				out = append(out, k+"="+strings.TrimSpace(v))
			}
		}
		// Also what survives exec but /proc/self/status does not show:
		// the parent-death signal, and whether the app leads its own
		// process group.
		if tid := unix.Gettid(); tid != os.Getpid() {
			return "", fmt.Errorf("the parent-death signal read on thread %d, not the main thread %d", tid, os.Getpid())
		}
		var sig int
		if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0); err != nil {
			return "", err
		}
		pgid, err := unix.Getpgid(0)
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("Pdeathsig=%d", sig), fmt.Sprintf("OwnGroup=%v", pgid == os.Getpid()))
		return strings.Join(out, " "), nil
	case "env":
		env := os.Environ()
		slices.Sort(env)
		return strings.Join(env, "\n"), nil
	case "getpid":
		return strconv.Itoa(os.Getpid()), nil
	case "cgroup":
		b, err := os.ReadFile("/proc/self/cgroup")
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(line, "0::") {
				return line, nil
			}
		}
		return "", err
	}
	if out, err, ok := attackProbe(action, a); ok {
		return out, err
	}
	if out, err, ok := sessionProbe(action, a); ok {
		return out, err
	}
	if out, err, ok := desktopProbe(action, a); ok {
		return out, err
	}
	return "", fmt.Errorf("unknown probe action %q", action)
}

func inetConnect(typ, proto, port int) error {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
}

// meanwhile runs f again and again on a thread of its own, the racing
// thread of an attack, until the stop it returns is called; stop returns
// once f has.
func meanwhile(f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				f()
			}
		}
	}()
	return func() { close(quit); <-done }
}

func unixConnect(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: name})
}

// rawFork forks with a raw syscall; the child exits at once.
func rawFork(nr, flags uintptr) (string, error) {
	pid, _, e := unix.RawSyscall6(nr, flags, 0, 0, 0, 0, 0)
	if e != 0 {
		return "", e
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(int(pid), &ws, 0, nil)
	return "", err
}

func clone3() (string, error) {
	// struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, …
	var args [11]uint64
	args[4] = uint64(unix.SIGCHLD)
	pid, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), unsafe.Sizeof(args), 0)
	if e != 0 {
		return "", e
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(int(pid), &ws, 0, nil)
	return "", err
}

// threads makes the runtime start new OS threads: each locked goroutine
// blocks in a syscall while holding its thread.
func threads() error {
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
		}()
	}
	ready.Wait()
	close(release)
	wg.Wait()
	return nil
}

// recvFD receives one descriptor over the unix socket fd.
func recvFD(sock int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return -1, fmt.Errorf("no fd received: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) == 0 {
		return -1, fmt.Errorf("no fd received: %v", err)
	}
	return fds[0], nil
}
