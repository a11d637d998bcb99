// Package trywrite writes to a socket without ever waiting: the fast path
// of a writer goroutine's owner (the peer link's hub, a control
// connection), which writes a line itself when its writer is idle and
// hands the writer only what the socket did not take.
package trywrite

import (
	"errors"
	"os"
	"syscall"
)

// Write writes b to the descriptor behind rc with one write(2), never
// waiting for room, and returns how much of it went. A socket that is
// full, or whose write deadline has passed (the writer's, armed for its
// last write), takes nothing and is no error: the caller's writer then
// writes it, with a fresh deadline. Any other failure is returned.
func Write(rc syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
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
	case werr == syscall.EAGAIN:
		return 0, nil
	case werr != nil:
		return 0, werr
	}
	return max(n, 0), nil
}
