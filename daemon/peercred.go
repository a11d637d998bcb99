package daemon

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// peerProc is a connection's peer, held by a pidfd for the "not an app"
// check.
type peerProc struct {
	pidfd int // -1: none could be had, err says why
	// how: "SO_PEERPIDFD" (the process that connected) or "pidfd_open"
	// (of SO_PEERCRED's pid: whatever process has it by then).
	how string
	err error
}

func (p peerProc) close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
	}
}

// getPeerPidfd is SO_PEERPIDFD (Linux 6.5): the kernel's pidfd of the
// process that connected.
func getPeerPidfd(sock int) (int, error) {
	return unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
}

// peerCred reads the peer's credentials as the kernel recorded them at
// connect (SO_PEERCRED) and a pidfd of it: peerPidfd's, or on
// ENOPROTOOPT pidfd_open of the pid.
func peerCred(nc net.Conn, peerPidfd func(sock int) (int, error)) (*unix.Ucred, peerProc, error) {
	proc := peerProc{pidfd: -1}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, proc, fmt.Errorf("%T is not a socket", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, proc, err
	}
	var cred *unix.Ucred
	var serr, perr error
	pidfd := -1
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			pidfd, perr = peerPidfd(int(fd))
		}
	}); err != nil {
		return nil, proc, err
	}
	if serr != nil {
		return nil, proc, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	proc.how = "SO_PEERPIDFD"
	if errors.Is(perr, unix.ENOPROTOOPT) {
		proc.how = "pidfd_open"
		if cred.Pid > 0 {
			pidfd, perr = unix.PidfdOpen(int(cred.Pid), 0)
		} else {
			perr = errors.New("no pid")
		}
	}
	switch {
	case perr == nil:
		proc.pidfd = pidfd
	case errors.Is(perr, unix.ESRCH) || (proc.how == "SO_PEERPIDFD" && errors.Is(perr, unix.EINVAL)):
		// Linux 6.5 to 6.15 answer SO_PEERPIDFD with EINVAL once the
		// peer is reaped; pidfd_open says ESRCH.
		proc.err = fmt.Errorf("it exited before the daemon could check it (%s: %v)", proc.how, perr)
	default:
		proc.err = fmt.Errorf("no pidfd of it (%s: %v)", proc.how, perr)
	}
	return cred, proc, nil
}

// boottime is now on CLOCK_BOOTTIME, the clock of /proc/PID/stat's
// start times.
func boottime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0 // no bound: never happens on Linux
	}
	return time.Duration(ts.Nano())
}
