package jail

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The hostile app's actions on process groups and sessions: an app in
// the daemon's session joined the daemon's process group, and from there
// reniced and idled every daemon thread (PRIO_PGRP and IOPRIO_WHO_PGRP
// with who 0, "the caller's group", which the filter lets through), and
// could no longer be stopped by signalling its own group. Each prints
// "ok" when the kernel let it through.

const (
	ioprioWhoPgrp = 2
	ioprioWhoUser = 3
	// ioprioIdle is IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0).
	ioprioIdle = 3 << 13
)

// pidfdGetInfoCmd is PIDFD_GET_INFO, _IOWR(0xFF, 11, struct pidfd_info) with
// the struct's first published size (64 bytes).
const pidfdGetInfoCmd = 0xc040ff0b

func sessionProbe(action string, a []string) (out string, err error, known bool) {
	known = true
	switch action {
	case "join_pgrp":
		// Join the process group of a[0] (the daemon).
		err = joinGroupOf(atoi(a[0]))
	case "pgrp_prio":
		// Join a[0]'s group, then set the group's nice value to 19: the
		// attack did it to every thread of the daemon (the tests aim it
		// at a stand-in in the daemon's session).
		if err = joinGroupOf(atoi(a[0])); err == nil {
			err = unix.Setpriority(unix.PRIO_PGRP, 0, 19)
		}
	case "pgrp_ioprio":
		// The same for the I/O priority: class idle.
		if err = joinGroupOf(atoi(a[0])); err == nil {
			_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoPgrp, 0, ioprioIdle)
			err = errOrNil(e)
		}
	case "ioprio_group":
		// Name a[0]'s group outright. The value is class none, the
		// kernel's default (harmless if let through).
		var pgid int
		if pgid, err = unix.Getpgid(atoi(a[0])); err == nil {
			_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoPgrp, uintptr(pgid), 0)
			err = errOrNil(e)
		}
	case "ioprio_user":
		// Every process of the user, to class none, as above.
		_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoUser, 0, 0)
		err = errOrNil(e)
	case "kill_group":
		// Signal 0 to a[0]'s group, by its negative id.
		var pgid int
		if pgid, err = unix.Getpgid(atoi(a[0])); err == nil {
			err = unix.Kill(-pgid, 0)
		}
	case "sigio_group":
		// Have the kernel signal a[0]'s group for us: a pipe owned by
		// the group (F_SETOWN with its negative id), SIGUSR1 for SIGIO
		// (F_SETSIG), O_ASYNC, and a write. Every call succeeds either
		// way; whether the signal arrived, only the group can tell.
		var pgid int
		if pgid, err = unix.Getpgid(atoi(a[0])); err != nil {
			break
		}
		var p [2]int
		if err = unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			break
		}
		for _, step := range [][2]int{{unix.F_SETOWN, -pgid}, {unix.F_SETSIG, int(unix.SIGUSR1)}, {unix.F_SETFL, unix.O_ASYNC | unix.O_NONBLOCK}} {
			if _, err = unix.FcntlInt(uintptr(p[0]), step[0], step[1]); err != nil {
				break
			}
		}
		if err == nil {
			_, err = unix.Write(p[1], []byte("x"))
		}
	case "sigmate":
		// The group the sigio probe aims at: it says "ready", then the
		// name of each signal it gets, and ends at SIGUSR2. Pending
		// signals are taken lowest first, so a SIGUSR1 sent before the
		// test's SIGUSR2 is said before it.
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, unix.SIGUSR1, unix.SIGUSR2)
		fmt.Println("ready")
		for sig := range sigs {
			fmt.Println(unix.SignalName(sig.(unix.Signal)))
			if sig == unix.SIGUSR2 {
				return "", nil, true
			}
		}
	case "kill_own_group":
		// kill(0, 0): the caller's own group.
		err = unix.Kill(0, 0)
	case "session":
		// Whether the app leads a session of its own.
		sid, e := unix.Getsid(0)
		if e != nil {
			return "", e, true
		}
		out = "own=" + strconv.FormatBool(sid == os.Getpid())
	case "setsid_child":
		// A child leaves the app's session: the attack's first step. The
		// child is this probe again (setsid_self), execed: a raw clone of
		// a Go process can deadlock in the runtime before it gets anywhere.
		var b []byte
		if b, err = exec.Command(os.Args[0], os.Args[1], "setsid_self").Output(); err == nil {
			out = strings.TrimSpace(string(b))
		}
	case "setsid_self":
		_, _, e := unix.RawSyscall(unix.SYS_SETSID, 0, 0, 0)
		err = errOrNil(e)
	case "open_flags_mode":
		// open(a[0], flags a[1], mode a[2]) with the mode as given,
		// raw: the filter's setuid rule must look at the mode only when
		// the flags create.
		flags := map[string]int{"O_RDONLY": unix.O_RDONLY, "O_CREAT": unix.O_WRONLY | unix.O_CREAT,
			"O_TMPFILE": unix.O_WRONLY | unix.O_TMPFILE}[a[1]]
		mode, _ := strconv.ParseUint(a[2], 8, 32)
		p, _ := unix.BytePtrFromString(a[0])
		for _, nr := range []uintptr{unix.SYS_OPEN, unix.SYS_OPENAT} {
			var fd uintptr
			var e unix.Errno
			if nr == unix.SYS_OPEN {
				fd, _, e = unix.Syscall(nr, uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC), uintptr(mode))
			} else {
				fd, _, e = unix.Syscall6(nr, uintptr(atFDCWD), uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC), uintptr(mode), 0, 0)
			}
			if e != 0 {
				return "", e, true
			}
			unix.Close(int(fd))
		}
	case "pidfd_info":
		// PIDFD_GET_INFO on a pidfd of a[0] (the daemon): its uid and
		// cgroup id.
		var fd int
		if fd, err = unix.PidfdOpen(atoi(a[0]), 0); err == nil {
			var info [64]byte
			info[0] = 0x3f // PIDFD_INFO_PID|CREDS|CGROUPID|EXIT|…
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), pidfdGetInfoCmd, uintptr(unsafe.Pointer(&info[0])))
			unix.Close(fd)
			err = errOrNil(e)
		}
	default:
		known = false
	}
	return out, err, known
}

// joinGroupOf puts the caller into the process group of pid.
func joinGroupOf(pid int) error {
	pgid, err := unix.Getpgid(pid)
	if err != nil {
		return err
	}
	return unix.Setpgid(0, pgid)
}

// atFDCWD is AT_FDCWD as a register holds it.
var atFDCWD = unix.AT_FDCWD
