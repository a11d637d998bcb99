package jail

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The hostile app's actions: what an adversarial review did from inside
// the jail, each as one probe action that prints "ok" when the kernel let
// it through (attackProbe's ok is false for an action it does not know).
// They are raw syscalls for the same reason as probe's: the errno must be
// the kernel's or the filter's.

func attackProbe(action string, a []string) (out string, err error, known bool) {
	known = true
	switch action {
	case "noop":
	case "tfo_sendto", "tfo_sendmsg", "tfo_sendmmsg":
		err = fastOpen(action, atoi(a[0]))
	case "tfo_connect":
		err = fastOpenConnect(atoi(a[0]))
	case "tcp_listen":
		// listen() on a socket never bound: the kernel binds an ephemeral
		// port itself, which the bind rules never see.
		err = withInet(func(fd int) error { return unix.Listen(fd, 1) })
	case "tcp_bind_listen":
		err = withInet(func(fd int) error {
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: atoi(a[0]), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return err
			}
			return unix.Listen(fd, 1)
		})
	case "thread_bind_listen":
		// From a thread that does not lead the process: the guard gets
		// the thread's id.
		err = onOtherThread(func() error {
			return withInet(func(fd int) error {
				if err := unix.Bind(fd, &unix.SockaddrInet4{Port: atoi(a[0]), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
					return err
				}
				return unix.Listen(fd, 1)
			})
		})
	case "connect_listen":
		// A failed connect leaves the socket bound to the ephemeral port
		// it took; listening there is a listen on an unchosen port.
		err = withInet(func(fd int) error {
			unix.Connect(fd, &unix.SockaddrInet4{Port: atoi(a[0]), Addr: [4]byte{127, 0, 0, 1}})
			return unix.Listen(fd, 1)
		})
	case "unix_autobind_listen":
		// SO_PASSCRED makes a connect bind the socket to an abstract name
		// (autobind) before it looks for the server: a granted socket
		// with none leaves the app a named socket, whose listen would
		// take connects from outside the jail.
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			break
		}
		defer unix.Close(fd)
		if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
			break
		}
		if cerr := unix.Connect(fd, &unix.SockaddrUnix{Name: a[0]}); cerr != unix.ENOENT {
			err = fmt.Errorf("connect to %s: %v, want ENOENT", a[0], cerr)
			break
		}
		err = unix.Listen(fd, 1)
	case "connect_swap_race":
		err = connectSwapRace(a[0], atoi(a[1]))
	case "dgram_sendto":
		err = withPair(unix.SOCK_DGRAM, func(fd int) error {
			return unix.Sendto(fd, []byte("forged"), 0, &unix.SockaddrUnix{Name: a[0]})
		})
	case "dgram_squat":
		err = withPair(unix.SOCK_DGRAM, func(fd int) error {
			// AF_UNSPEC dissolves the pair's connection; the socket is
			// then free to take a name.
			sa := [2]byte{unix.AF_UNSPEC, 0}
			if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), 2); e != 0 {
				return e
			}
			return unix.Bind(fd, &unix.SockaddrUnix{Name: a[0]})
		})
	case "stream_squat":
		err = withPair(unix.SOCK_STREAM, func(fd int) error { return unix.Bind(fd, &unix.SockaddrUnix{Name: a[0]}) })
	case "seqpacket_pair":
		err = withPair(unix.SOCK_SEQPACKET, func(int) error { return nil })
	case "unix_socket":
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	case "fchmod_ro":
		mode, _ := strconv.ParseUint(a[1], 8, 32)
		err = withRO(a[0], func(fd int) error { return unix.Fchmod(fd, uint32(mode)) })
	case "fchown_ro":
		err = withRO(a[0], func(fd int) error { return unix.Fchown(fd, os.Getuid(), os.Getgid()) })
	case "fsetxattr_ro":
		err = withRO(a[0], func(fd int) error { return unix.Fsetxattr(fd, "user.octosup", []byte("x"), 0) })
	case "fremovexattr_ro":
		err = withRO(a[0], func(fd int) error { return unix.Fremovexattr(fd, "user.octosup") })
	case "getxattr":
		_, err = unix.Lgetxattr(a[0], "user.octosup", make([]byte, 64))
		if err == unix.ENODATA {
			err = nil
		}
	case "setxattrat", "getxattrat", "listxattrat", "removexattrat", "file_setattr":
		err = atCall(action, a[0])
	case "listxattr":
		_, err = unix.Listxattr(a[0], make([]byte, 256))
	case "creat_mode":
		mode, _ := strconv.ParseUint(a[1], 8, 32)
		var fd int
		if fd, err = unix.Open(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, uint32(mode)); err == nil {
			unix.Close(fd)
		}
	case "mkdir_mode":
		mode, _ := strconv.ParseUint(a[1], 8, 32)
		err = unix.Mkdir(a[0], uint32(mode))
	case "mknod_mode":
		mode, _ := strconv.ParseUint(a[1], 8, 32)
		err = unix.Mknod(a[0], unix.S_IFREG|uint32(mode), 0)
	case "openat2":
		var fd int
		if fd, err = unix.Openat2(unix.AT_FDCWD, a[0], &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC}); err == nil {
			unix.Close(fd)
		}
	case "setflags_ro":
		// FS_IOC_SETFLAGS with the flags the file has plus nodump: an
		// attribute change Landlock's ioctl right (devices only) misses.
		err = withRO(a[0], func(fd int) error {
			var flags int
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_GETFLAGS, uintptr(unsafe.Pointer(&flags))); e != 0 {
				return e
			}
			flags |= 0x40 // FS_NODUMP_FL
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&flags)))
			return errOrNil(e)
		})
	case "verity_ro":
		// fs-verity makes a file immutable for good, from a read-only fd.
		err = withRO(a[0], func(fd int) error {
			arg := unix.FsverityEnableArg{Version: 1, Hash_algorithm: unix.FS_VERITY_HASH_ALG_SHA256, Block_size: 4096}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_ENABLE_VERITY, uintptr(unsafe.Pointer(&arg)))
			return errOrNil(e)
		})
	case "memfd_exec", "memfd_exec_proc":
		err = memfdExec(action == "memfd_exec_proc")
	case "interp_exec":
		// The ELF interpreter may be executed (the program needs it); run
		// as a program, it loads any readable binary itself.
		err = unix.Exec(a[0], []string{a[0], "/bin/sh", "-c", "echo ok"}, nil)
	case "reexec":
		self, _ := os.Executable()
		err = unix.Exec(self, []string{self, probeArg, "noop"}, nil)
	case "execveat_self":
		self, _ := os.Executable()
		err = execveat(unix.AT_FDCWD, self, []string{self, probeArg, "noop"}, 0)
	case "clone_parent":
		// The child becomes the daemon's: a zombie only the daemon can
		// reap. The control forks an ordinary child the probe reaps.
		flags := uintptr(unix.SIGCHLD)
		if a[0] == "parent" {
			flags |= unix.CLONE_PARENT
		}
		out, err = rawFork(unix.SYS_CLONE, flags)
		if err == unix.ECHILD {
			err = nil // the child is not ours: CLONE_PARENT took
		}
	case "pdeathsig":
		sig, _ := strconv.Atoi(a[0])
		err = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0)
	case "prlimit":
		// Set another process's limit to what it is: harmless if let
		// through, but the same call could take the daemon's descriptors
		// to zero.
		pid := atoi(a[0])
		var old unix.Rlimit
		if err = unix.Prlimit(pid, unix.RLIMIT_CORE, nil, &old); err == nil {
			err = unix.Prlimit(pid, unix.RLIMIT_CORE, &old, nil)
		}
	case "setpriority":
		pid := atoi(a[0])
		var prio int
		if prio, err = unix.Getpriority(unix.PRIO_PROCESS, pid); err == nil {
			err = unix.Setpriority(unix.PRIO_PROCESS, pid, 20-prio)
		}
	case "setpriority_user":
		var prio int
		if prio, err = unix.Getpriority(unix.PRIO_USER, 0); err == nil {
			err = unix.Setpriority(unix.PRIO_USER, 0, 20-prio)
		}
	case "setaffinity":
		pid := atoi(a[0])
		var set unix.CPUSet
		if err = unix.SchedGetaffinity(pid, &set); err == nil {
			err = unix.SchedSetaffinity(pid, &set)
		}
	case "setscheduler":
		pid := atoi(a[0])
		pol, _, e := unix.Syscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(pid), 0, 0)
		if e != 0 {
			return "", e, true
		}
		var param [1]int32
		if _, _, e := unix.Syscall(unix.SYS_SCHED_GETPARAM, uintptr(pid), uintptr(unsafe.Pointer(&param[0])), 0); e != 0 {
			return "", e, true
		}
		_, _, e = unix.Syscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(pid), pol, uintptr(unsafe.Pointer(&param[0])))
		err = errOrNil(e)
	case "ioprio":
		const whoProcess = 1
		pid := atoi(a[0])
		// Class none (0), which any process may set: the current class
		// may be realtime, which only CAP_SYS_ADMIN may set, and an EPERM
		// for that would pass for the filter's.
		_, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, whoProcess, uintptr(pid), 0)
		if e == 0 {
			_, _, e = unix.Syscall(unix.SYS_IOPRIO_SET, whoProcess, uintptr(pid), 0)
		}
		err = errOrNil(e)
	case "modify_ldt":
		buf := make([]byte, 16)
		_, _, e := unix.Syscall(unix.SYS_MODIFY_LDT, 0, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		err = errOrNil(e)
	case "shm_attach":
		// Attach another process's segment by id and write to it.
		var seg []byte
		if seg, err = unix.SysvShmAttach(atoi(a[0]), 0, 0); err == nil {
			copy(seg, "owned")
			err = unix.SysvShmDetach(seg)
		}
	case "shm_list":
		// SHM_STAT walks every segment on the machine by index.
		var ds unix.SysvShmDesc
		_, err = unix.SysvShmCtl(0, 14 /* SHM_INFO */, &ds)
	case "msg_recv":
		buf := make([]byte, 64)
		_, _, e := unix.Syscall6(unix.SYS_MSGRCV, uintptr(atoi(a[0])), uintptr(unsafe.Pointer(&buf[0])), 56, 0, unix.IPC_NOWAIT, 0)
		err = errOrNil(e)
	case "sem_op":
		op := struct {
			num uint16
			op  int16
			flg int16
		}{0, 1, unix.IPC_NOWAIT}
		_, _, e := unix.Syscall(unix.SYS_SEMOP, uintptr(atoi(a[0])), uintptr(unsafe.Pointer(&op)), 1)
		err = errOrNil(e)
	case "mq_open":
		name, _ := unix.BytePtrFromString(a[0])
		fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(name)), unix.O_RDWR, 0, 0, 0, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		err = errOrNil(e)
	case "inotify":
		var fd int
		if fd, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			return "", err, true
		}
		defer unix.Close(fd)
		_, err = unix.InotifyAddWatch(fd, a[0], unix.IN_CREATE|unix.IN_OPEN)
	case "inotify_flood":
		// inotify_add_watch of a[0] for a[1] seconds, as fast as the
		// daemon answers: "calls N cpu_ms M" (M: the probe's own CPU).
		var fd int
		if fd, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			return "", err, true
		}
		defer unix.Close(fd)
		end := time.Now().Add(time.Duration(atoi(a[1])) * time.Second)
		n := 0
		for ; time.Now().Before(end); n++ {
			if _, err = unix.InotifyAddWatch(fd, a[0], unix.IN_CREATE); err != nil {
				return "", err, true
			}
		}
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru)
		out = fmt.Sprintf("calls %d cpu_ms %d", n, (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Milliseconds())
	case "inotify_swap":
		// Put a link to a[1] in the place of the granted directory a[0]
		// (inside an rw grant), watch a[0] while it is the link, then put
		// the directory back.
		if err = unix.Rename(a[0], a[0]+".real"); err != nil {
			return "", err, true
		}
		defer unix.Rename(a[0]+".real", a[0])
		if err = unix.Symlink(a[1], a[0]); err != nil {
			return "", err, true
		}
		defer unix.Unlink(a[0])
		var fd int
		if fd, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			return "", err, true
		}
		defer unix.Close(fd)
		_, err = unix.InotifyAddWatch(fd, a[0], unix.IN_CREATE|unix.IN_OPEN)
	case "write_file":
		// Write a[1] into the existing file a[0] (cgroup.procs: "0" moves
		// the writer).
		var fd int
		if fd, err = unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			_, err = unix.Write(fd, []byte(a[1]))
			unix.Close(fd)
		}
	default:
		known = false
	}
	return out, err, known
}

// onOtherThread runs f locked to an OS thread other than the main one.
func onOtherThread(f func() error) error {
	for {
		done := make(chan error)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if unix.Gettid() == unix.Getpid() {
				done <- errMainThread
				return
			}
			done <- f()
		}()
		if err := <-done; err != errMainThread {
			return err
		}
	}
}

var errMainThread = errors.New("on the main thread")

func withInet(f func(fd int) error) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

func withPair(typ int, f func(fd int) error) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	return f(fds[0])
}

func withRO(path string, f func(fd int) error) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

// fastOpen sends data with MSG_FASTOPEN to port on loopback, which
// connects the socket without connect(2): a blocking send returns once
// the handshake is done and the data is sent.
func fastOpen(how string, port int) error {
	return withInet(func(fd int) error {
		tv := unix.Timeval{Sec: 5}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		to := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
		msg := []byte("hello")
		var err error
		switch how {
		case "tfo_sendto":
			err = unix.Sendto(fd, msg, unix.MSG_FASTOPEN, to)
		case "tfo_sendmsg":
			_, err = unix.SendmsgN(fd, msg, nil, to, unix.MSG_FASTOPEN)
		case "tfo_sendmmsg":
			err = sendmmsgFastOpen(fd, msg, port)
		}
		return err
	})
}

func sendmmsgFastOpen(fd int, msg []byte, port int) error {
	var sa unix.RawSockaddrInet4
	sa.Family = unix.AF_INET
	sa.Port = uint16(port>>8) | uint16(port&0xff)<<8
	sa.Addr = [4]byte{127, 0, 0, 1}
	iov := unix.Iovec{Base: &msg[0]}
	iov.SetLen(len(msg))
	var hdr struct {
		msg unix.Msghdr
		n   uint32
		_   uint32
	}
	hdr.msg.Name = (*byte)(unsafe.Pointer(&sa))
	hdr.msg.Namelen = unix.SizeofSockaddrInet4
	hdr.msg.Iov = &iov
	hdr.msg.SetIovlen(1)
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdr)), 1, unix.MSG_FASTOPEN, 0, 0)
	if e != 0 {
		return e
	}
	if n != 1 {
		return fmt.Errorf("sendmmsg sent %d", n)
	}
	return nil
}

// fastOpenConnect: TCP_FASTOPEN_CONNECT defers the handshake from
// connect() to the first write.
func fastOpenConnect(port int) error {
	return withInet(func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1); err != nil {
			return err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		_, err := unix.Write(fd, []byte("hello"))
		return err
	})
}

// memfdExec copies /bin/sh into a memfd and executes it, with execveat
// on the descriptor or execve of its /proc/self/fd link.
func memfdExec(viaProc bool) error {
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("payload", 0)
	if err != nil {
		return err
	}
	if _, err := unix.Write(fd, sh); err != nil {
		return err
	}
	argv := []string{"sh", "-c", "echo ok"}
	if viaProc {
		return unix.Exec("/proc/self/fd/"+strconv.Itoa(fd), argv, nil)
	}
	return execveat(fd, "", argv, unix.AT_EMPTY_PATH)
}

func execveat(dirfd int, path string, argv []string, flags int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	av := make([]*byte, 0, len(argv)+1)
	for _, arg := range argv {
		b, err := unix.BytePtrFromString(arg)
		if err != nil {
			return err
		}
		av = append(av, b)
	}
	av = append(av, nil)
	env := []*byte{nil}
	_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&av[0])), uintptr(unsafe.Pointer(&env[0])), uintptr(flags), 0)
	return e
}

// atCall makes one of the *at metadata calls of Linux 6.13 and 6.17 by
// number, on path: libseccomp 2.5 names none of them, and a filter that
// skipped the names it could not resolve let them all through.
func atCall(action, path string) error {
	const (
		nrSetxattrat    = 463
		nrGetxattrat    = 464
		nrListxattrat   = 465
		nrRemovexattrat = 466
		nrFileGetattr   = 468
		nrFileSetattr   = 469
	)
	p, _ := unix.BytePtrFromString(path)
	name, _ := unix.BytePtrFromString("user.octosup")
	cwd := unix.AT_FDCWD
	atCwd := uintptr(cwd)
	val := []byte("x")
	// struct xattr_args {u64 value; u32 size; u32 flags}
	args := struct {
		value       uint64
		size, flags uint32
	}{uint64(uintptr(unsafe.Pointer(&val[0]))), 1, 0}
	var e unix.Errno
	switch action {
	case "setxattrat":
		_, _, e = unix.Syscall6(nrSetxattrat, atCwd, uintptr(unsafe.Pointer(p)), 0, uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	case "getxattrat":
		_, _, e = unix.Syscall6(nrGetxattrat, atCwd, uintptr(unsafe.Pointer(p)), 0, uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		if e == unix.ENODATA {
			e = 0
		}
	case "listxattrat":
		buf := make([]byte, 256)
		_, _, e = unix.Syscall6(nrListxattrat, atCwd, uintptr(unsafe.Pointer(p)), 0, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0)
	case "removexattrat":
		_, _, e = unix.Syscall6(nrRemovexattrat, atCwd, uintptr(unsafe.Pointer(p)), 0, uintptr(unsafe.Pointer(name)), 0, 0)
		if e == unix.ENODATA {
			e = 0
		}
	case "file_setattr":
		// struct file_attr (FILE_ATTR_SIZE_VER0): read, set NODUMP, write.
		var fa [24]byte
		_, _, e = unix.Syscall6(nrFileGetattr, atCwd, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&fa[0])), 24, 0, 0)
		if e == 0 {
			fa[0] |= 0x80 // FS_XFLAG_NODUMP
			_, _, e = unix.Syscall6(nrFileSetattr, atCwd, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&fa[0])), 24, 0, 0)
			if e == 0 {
				fa[0] &^= 0x80
				unix.Syscall6(nrFileSetattr, atCwd, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&fa[0])), 24, 0, 0)
			}
		}
	}
	return errOrNil(e)
}

// connectSwapRace connects descriptor 100 to the unix socket path, tries
// times, while another thread swaps a unix socket and a netlink one onto
// 100. A guard that checked the socket it took, found netlink and had the
// kernel make the app's own call (SECCOMP_USER_NOTIF_FLAG_CONTINUE) let
// the kernel look the number up again: by then the unix socket, which it
// connected to any path (a hostile review's). nil is a connect made.
func connectSwapRace(path string, tries int) error {
	const slot = 100
	u, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(u)
	n, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(n)
	if err := unix.Dup3(u, slot, unix.O_CLOEXEC); err != nil {
		return err
	}
	var sa unix.RawSockaddrUnix
	sa.Family = unix.AF_UNIX
	for i := range len(path) {
		sa.Path[i] = int8(path[i])
	}
	defer meanwhile(func() {
		unix.Dup3(u, slot, unix.O_CLOEXEC)
		unix.Dup3(n, slot, unix.O_CLOEXEC)
	})()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var last error = unix.EINVAL
	for range tries {
		_, _, e := unix.Syscall(unix.SYS_CONNECT, slot, uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
		if e == 0 {
			return nil
		}
		last = e
	}
	return last
}
