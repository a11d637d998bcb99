// Package trywrite writes to a socket without ever waiting: the fast path
// of a writer goroutine's owner (the peer link's hub, a control
// connection), which writes a line itself when its writer is idle and
// hands the writer only what the socket did not take.
package trywrite

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxIOV is the most buffers one writev(2) takes (Linux's IOV_MAX):
// with more it fails EINVAL.
const maxIOV = 1024

// Write writes bufs to the descriptor behind rc with one writev(2),
// never waiting for room, and returns how many bytes went: of the first
// maxIOV buffers at most, the rest being the caller's to write as what
// the socket did not take. A socket that is full, or whose write
// deadline has passed (the writer's, armed for its last write), takes
// nothing and is no error: the caller's writer then writes it, with a
// fresh deadline. Any other failure is returned.
func Write(rc syscall.RawConn, bufs [][]byte) (int, error) {
	bufs = bufs[:min(len(bufs), maxIOV)]
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Writev(int(fd), bufs)
			if werr != unix.EINTR {
				break
			}
		}
		return true // never wait: what did not go is the writer's
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil:
		return 0, err
	case werr == unix.EAGAIN:
		return 0, nil
	case werr != nil:
		return 0, werr
	}
	return max(n, 0), nil
}
