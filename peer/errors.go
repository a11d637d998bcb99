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
	ErrNotConnected = errors.New("the app is not connected: start it first")
	// ErrUnknownApproval: no pending approval has that id (it was answered,
	// expired, or its app exited).
	ErrUnknownApproval = errors.New("no pending approval with that id")
	// ErrKernelAttached: another connection is the agent kernel.
	ErrKernelAttached = errors.New("another agent kernel is already attached")
	// ErrKernelDetached: this kernel session was detached.
	ErrKernelDetached = errors.New("this kernel session is detached: attach again")
	// ErrUnknownRequest: the app has no open request with that req_id in the
	// state the call needs (already answered, ended, or never sent).
	ErrUnknownRequest = errors.New("no such open request")
	// ErrInvalid: the call's arguments are malformed; the message says how.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the Manager was closed.
	ErrClosed = errors.New("peer manager closed")

	// Refusals of a tool call (ToolCall), besides ErrNotConnected and
	// ErrInvalid.

	// ErrDuplicate: the call_id is outstanding for that app, or finished
	// recently (the daemon remembers the last DuplicateWindow ids per app).
	ErrDuplicate = errors.New("the call_id is in use or was used recently for this app: give each call its own")
	// ErrUnknownContext: the context is not one the app has open.
	ErrUnknownContext = errors.New("the app has no such open context")
	// ErrDeclined: the app may not receive the call (no grants.tools entry
	// for the tool, or the context's account is outside sandbox.accounts).
	ErrDeclined = errors.New("the app may not receive this call")
	// ErrUnknownCall: no outstanding call has that id (ToolCancel).
	ErrUnknownCall = errors.New("no outstanding call with that id")

	// ErrLimit: the app is at one of the daemon's limits (MaxCalls);
	// the message says which.
	ErrLimit = errors.New("the app is at a limit")
	// ErrQueueFull: the app's write queue holds as much as frames from
	// outside the link may fill (it is not reading fast enough); the
	// frame was not queued, and the app is still connected.
	ErrQueueFull = errors.New("the app's write queue is full: it is not reading its hub")
)

// Code returns the control-socket error code for an error of this package
// ("internal" for anything else).
func Code(err error) string {
	switch {
	case errors.Is(err, ErrNotConnected):
		return "not_connected"
	case errors.Is(err, ErrUnknownApproval):
		return "unknown_approval"
	case errors.Is(err, ErrKernelAttached):
		return "kernel_attached"
	case errors.Is(err, ErrKernelDetached):
		return "kernel_detached"
	case errors.Is(err, ErrUnknownRequest):
		return "unknown_request"
	case errors.Is(err, ErrInvalid):
		return "bad_request"
	case errors.Is(err, ErrDuplicate):
		return frame.CodeDuplicate
	case errors.Is(err, ErrUnknownContext):
		return frame.CodeUnknownContext
	case errors.Is(err, ErrDeclined):
		return CodeDeclined
	case errors.Is(err, ErrUnknownCall):
		return "unknown_call"
	case errors.Is(err, ErrLimit):
		return CodeQuotaExceeded
	case errors.Is(err, ErrQueueFull):
		return CodeQueueFull
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return frame.CodeInternal
}

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
