package peer

import (
	"errors"
	"fmt"

	"octosup/control"
	"octosup/peer/internal/frame"
)

// Error is the wire error {code, message} of replies and tool results; a
// Manager method returns it as a Go error.
type Error = frame.Error

// Errors of the Go API, for errors.Is; Code maps each to the control
// socket's code. Their texts say what each means.
var (
	ErrNotConnected    = coded("not_connected", "the app is not connected: start it first")
	ErrUnknownApproval = coded("unknown_approval", "no pending approval with that id") // answered, expired, or its app exited
	ErrKernelAttached  = coded("kernel_attached", "another agent kernel is already attached")
	ErrKernelDetached  = coded("kernel_detached", "this kernel session is detached: attach again")
	ErrUnknownRequest  = coded("unknown_request", "no such open request") // in the state the call needs
	ErrInvalid         = coded("bad_request", "invalid argument")         // the message says how
	ErrClosed          = coded(frame.CodeInternal, "peer manager closed")
	// ErrDuplicate: the call_id is outstanding, or among the app's last
	// DuplicateWindow finished.
	ErrDuplicate      = coded(frame.CodeDuplicate, "the call_id is in use or was used recently for this app: give each call its own")
	ErrUnknownContext = coded(frame.CodeUnknownContext, "the app has no such open context")
	// ErrDeclined: the tool is not in grants.tools, or the context's
	// account not in sandbox.accounts.
	ErrDeclined    = coded(CodeDeclined, "the app may not receive this call")
	ErrUnknownCall = coded("unknown_call", "no outstanding call with that id")
	ErrLimit       = coded(CodeQuotaExceeded, "the app is at a limit") // the message says which
	// ErrQueueFull: the app's write queue holds what frames from outside
	// the link may fill; the frame was not queued, the app stays connected.
	ErrQueueFull = coded(CodeQueueFull, "the app's write queue is full: it is not reading its hub")
)

// Code returns the control-socket code of an error ("internal" for one
// not of this package).
func Code(err error) string {
	var c *codedError
	if errors.As(err, &c) {
		return c.code
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return frame.CodeInternal
}

// codedError is one of the errors above.
type codedError struct{ code, msg string }

func (e *codedError) Error() string { return e.msg }

func coded(code, msg string) error { return &codedError{code, msg} }

// refusal is an error of a kind above with a message of its own, without
// the kind's text in front (the control socket says it as the code).
// errors.Is finds the kind, and any error the message wraps.
type refusal struct {
	kind error
	msg  error
}

func (r *refusal) Error() string   { return r.msg.Error() }
func (r *refusal) Unwrap() []error { return []error{r.kind, r.msg} }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Errorf(format, args...)}
}

// relayRoom is the most a value relayed to a control connection (an app's
// pass-through frame, a tool's result, a request's args) may take
// re-encoded (frame.RelayedLen): a control line less 4 KiB for its other
// members (ids and names of at most 128 bytes). Past it the control client
// would drop the connection.
const relayRoom = control.MaxLine - 4096
