package helper

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Report says which jail layers took for a process, and at which Landlock
// ABI; status shows it and the daemon logs it at start. Layers are env,
// fds, no_new_privs, caps, landlock, seccomp; Missing names what the
// kernel could not enforce (landlock, landlock.truncate, landlock.net,
// landlock.scope, seccomp). Grants are the desktop sockets and devices
// the process was given, and how.
type Report struct {
	LandlockABI int      `json:"landlock_abi"`
	Layers      []string `json:"layers"`
	Missing     []string `json:"missing"`
	Grants      []Grant  `json:"grants,omitempty"`
}

// Grant is one desktop socket or device an app got: Name as in its entry
// (wayland, pulseaudio, pipewire, dri), Path what it reaches, Via how
// (GrantGuard for a socket; GrantNode for a render node, a Landlock rule;
// GrantNoNode for dri on a machine with no render node).
type Grant struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	Via  string `json:"via"`
}

// How a device is given (Grant.Via).
const (
	GrantNode   = "landlock"
	GrantNoNode = "no-render-node"
)

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
