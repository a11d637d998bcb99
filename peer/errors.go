package peer

import (
	"errors"
	"fmt"

	"octosup/control"
	"octosup/peer/internal/frame"
)

// Error is the wire error {code, message} of the link's replies and tool
// results (Result.Error, KernelReply.Error). It is also a Go error, so a
// Manager method returns it as is.
type Error = frame.Error

// Errors of the Go API, for callers to branch on (errors.Is). Code maps each
// to the stable code the control socket answers with.
var (
	// ErrNotConnected: the app has no process on its hub right now.
	ErrNotConnected = coded("not_connected", "the app is not connected: start it first")
	// ErrUnknownApproval: no pending approval has that id (it was answered,
	// expired, or its app exited).
	ErrUnknownApproval = coded("unknown_approval", "no pending approval with that id")
	// ErrKernelAttached: another connection is the agent kernel.
	ErrKernelAttached = coded("kernel_attached", "another agent kernel is already attached")
	// ErrKernelDetached: this kernel session was detached.
	ErrKernelDetached = coded("kernel_detached", "this kernel session is detached: attach again")
	// ErrUnknownRequest: the app has no open request with that req_id in the
	// state the call needs (already answered, ended, or never sent).
	ErrUnknownRequest = coded("unknown_request", "no such open request")
	// ErrInvalid: the call's arguments are malformed; the message says how.
	ErrInvalid = coded("bad_request", "invalid argument")
	// ErrClosed: the Manager was closed.
	ErrClosed = coded(frame.CodeInternal, "peer manager closed")

	// Refusals of a tool call (ToolCall), besides ErrNotConnected and
	// ErrInvalid.

	// ErrDuplicate: the call_id is outstanding for that app, or finished
	// recently (the daemon remembers the last DuplicateWindow ids per app).
	ErrDuplicate = coded(frame.CodeDuplicate, "the call_id is in use or was used recently for this app: give each call its own")
	// ErrUnknownContext: the context is not one the app has open.
	ErrUnknownContext = coded(frame.CodeUnknownContext, "the app has no such open context")
	// ErrDeclined: the app may not receive the call (no grants.tools entry
	// for the tool, or the context's account is outside sandbox.accounts).
	ErrDeclined = coded(CodeDeclined, "the app may not receive this call")
	// ErrUnknownCall: no outstanding call has that id (ToolCancel).
	ErrUnknownCall = coded("unknown_call", "no outstanding call with that id")

	// ErrLimit: the app is at one of the daemon's limits (MaxCalls);
	// the message says which.
	ErrLimit = coded(CodeQuotaExceeded, "the app is at a limit")
	// ErrQueueFull: the app's write queue holds as much as frames from
	// outside the link may fill (it is not reading fast enough); the
	// frame was not queued, and the app is still connected.
	ErrQueueFull = coded(CodeQueueFull, "the app's write queue is full: it is not reading its hub")
)

// Code returns the control-socket error code for an error of this package
// ("internal" for anything else).
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

// codedError is one of the errors above: its message, and the code Code
// answers for it.
type codedError struct{ code, msg string }

func (e *codedError) Error() string { return e.msg }

func coded(code, msg string) error { return &codedError{code, msg} }

// refusal is an error of one of the kinds above whose message is its
// own: what happened and what to do, without the kind's text in front
// ("invalid argument: …"), which the control socket says once as the
// code. errors.Is finds the kind, and any error the message wraps.
type refusal struct {
	kind error
	msg  error
}

func (r *refusal) Error() string   { return r.msg.Error() }
func (r *refusal) Unwrap() []error { return []error{r.kind, r.msg} }

// refuse is an error of kind saying fmt.Errorf(format, args...).
func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Errorf(format, args...)}
}

// relayRoom is the most bytes a value the daemon relays to a control
// connection (an app's pass-through frame, a tool's result, a request's
// args) may take once re-encoded (frame.RelayedLen): a control line's
// limit less 4 KiB for the line's other members (ids and names of at most
// 128 bytes each). Past it the line would be one its reader refuses, and
// a control client drops the connection that sent it. (A kernel's value
// bound for an app is held to the frame it is written into, encoded.)
const relayRoom = control.MaxLine - 4096
