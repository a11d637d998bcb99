// Package passrights turns off a unix socket's taking of descriptors
// (SO_PASSRIGHTS, Linux 6.16): the kernel then refuses, with EPERM, an
// SCM_RIGHTS message sent to it, and a listener's connections inherit
// the setting at connect, before they are accepted.
//
// The daemon reads lines from apps (their hubs) and clients (the control
// socket) and never asks for a descriptor. One that arrives anyway is
// closed by the thread that reads past it or closes the socket, and the
// close of a TCP socket with unsent data and SO_LINGER set waits out the
// linger: whoever can send the daemon a descriptor can hold one of its
// threads, and whatever waits on that thread, for as long as it likes.
package passrights

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// soPassRights is SO_PASSRIGHTS, which x/sys does not export yet: the
// asm-generic number, which amd64 and arm64 use.
const soPassRights = 83

// Refuse turns descriptor passing off on the unix socket fd. Before
// Linux 6.16 the kernel has no such option, and Refuse does nothing.
func Refuse(fd int) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, soPassRights, 0)
	if errors.Is(err, unix.ENOPROTOOPT) {
		return nil
	}
	return err
}

// RefuseOn is Refuse on the socket behind c (a *net.UnixListener, say).
func RefuseOn(c syscall.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = Refuse(int(fd)) }); err != nil {
		return err
	}
	return serr
}
