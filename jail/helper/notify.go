package helper

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Notifies reports whether any of spec's seccomp rules hands a call to
// the daemon: then the filter is loaded with a listener, which goes to
// the daemon before the exec.
func (s Spec) Notifies() bool {
	for _, r := range s.Seccomp {
		if r.Notify {
			return true
		}
	}
	return false
}

// RecvFD takes the descriptor SendFD sent, without waiting: it is there
// before the process it came from exec'd. The descriptor is
// close-on-exec.
func RecvFD(sock int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || n != 1 || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor in the message (%d bytes, %d control messages): %v", n, len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("want one descriptor, got %d: %v", len(fds), err)
	}
	return fds[0], nil
}
