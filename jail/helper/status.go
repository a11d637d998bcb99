package helper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Report says which jail layers took for a process, and at which Landlock
// ABI; status shows it and the daemon logs it at start. Layers are env,
// fds, no_new_privs, caps, landlock, seccomp; Missing names what the
// kernel could not enforce (landlock, landlock.truncate, landlock.net,
// landlock.scope, seccomp).
type Report struct {
	LandlockABI int      `json:"landlock_abi"`
	Layers      []string `json:"layers"`
	Missing     []string `json:"missing"`
}

// LayerError says which jail layer failed and why: it is what status shows
// after "failed: ", e.g. "landlock: restrict: EINVAL".
type LayerError struct {
	Layer   string `json:"layer"`
	Message string `json:"message"`
	Errno   string `json:"errno,omitempty"`
	// Code is the errno's number, for Unwrap.
	Code int `json:"code,omitempty"`
}

func (e *LayerError) Error() string {
	s := e.Layer + ": " + e.Message
	if e.Errno != "" {
		s += ": " + e.Errno
	}
	return s
}

// Unwrap gives the errno, when there is one, for errors.Is.
func (e *LayerError) Unwrap() error {
	if e.Code == 0 {
		return nil
	}
	return syscall.Errno(e.Code)
}

// LayerErr is the LayerError of layer for err, which may hold an errno.
func LayerErr(layer, msg string, err error) *LayerError {
	le := &LayerError{Layer: layer, Message: msg}
	var e unix.Errno
	if errors.As(err, &e) {
		le.Errno = errnoOf(e)
		le.Code = int(e)
	} else if err != nil && msg == "" {
		le.Message = err.Error()
	}
	return le
}

// ErrDied is wrapped when the helper ended without saying why (killed,
// or crashed before it could report).
var ErrDied = errors.New("jail helper ended without a report")

// statusMsg is one line on the status pipe.
type statusMsg struct {
	Report  *Report     `json:"report,omitempty"`
	Failure *LayerError `json:"failure,omitempty"`
}

// writeStatus writes one line on the status pipe; a daemon that went away
// meanwhile is not the helper's to report.
func writeStatus(m statusMsg) {
	b := appendStatus(make([]byte, 0, 256), m)
	for len(b) > 0 {
		n, err := unix.Write(StatusFD, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		b = b[n:]
	}
}

// ParseStatus reads what the helper wrote on its status pipe up to EOF: a
// report then EOF is an exec that succeeded; a failure line is the reason
// it did not (a *LayerError); nothing at all wraps ErrDied.
func ParseStatus(data []byte) (Report, error) {
	var rep *Report
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var m statusMsg
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return Report{}, fmt.Errorf("jail: bad helper status %q: %w", sc.Text(), err)
		}
		if m.Failure != nil {
			return Report{}, m.Failure
		}
		if m.Report != nil {
			rep = m.Report
		}
	}
	if err := sc.Err(); err != nil {
		return Report{}, fmt.Errorf("jail: bad helper status: %w", err)
	}
	if rep == nil {
		return Report{}, fmt.Errorf("jail: %w", ErrDied)
	}
	if rep.Missing == nil {
		rep.Missing = []string{}
	}
	return *rep, nil
}
