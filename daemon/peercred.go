package daemon

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerCred reads the peer's pid, uid and gid as the kernel recorded them
// at connect time (SO_PEERCRED): what the peer says never matters.
func peerCred(nc net.Conn) (Peer, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return Peer{}, fmt.Errorf("%T is not a socket", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Peer{Pid: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}, nil
}
