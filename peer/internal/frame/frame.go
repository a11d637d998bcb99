package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxFrame is the most bytes one hub line may hold, newline excluded
// (docs/protocol.md: 1 MiB).
const MaxFrame = 1 << 20

// Envelope is the top-level key of every peer-link frame; any other
// object is a pass-through frame.
const Envelope = "octos_peer"

// Frame types, the "type" member inside the envelope.
const (
	TypeRequest       = "request"        // up
	TypeToolResult    = "tool_result"    // up
	TypeReply         = "reply"          // down
	TypeEvent         = "event"          // down
	TypeToolCall      = "tool_call"      // down
	TypeToolCancel    = "tool_cancel"    // down
	TypeContextClosed = "context_closed" // down
	TypeError         = "error"          // down
)

// Error codes of the link (docs/protocol.md, "Error codes"): stable
// strings that apps and the kernel branch on.
const (
	CodeBadFrame            = "bad_frame"
	CodeUnknownMethod       = "unknown_method"
	CodeNotGranted          = "not_granted"
	CodeConsentRequired     = "consent_required"
	CodeConsentDenied       = "consent_denied"
	CodeUnknownContext      = "unknown_context"
	CodeDuplicate           = "duplicate"
	CodeNoKernel            = "no_kernel"
	CodeTimeout             = "timeout"
	CodeCancelled           = "cancelled"
	CodeConfirmationSkipped = "confirmation_skipped"
	CodeInternal            = "internal"
	// CodeQuotaExceeded is octosup's own: the request would pass one of
	// the daemon's limits (docs/protocol.md, "Limits") and nothing could
	// be dropped to make room; the message says which.
	CodeQuotaExceeded = "quota_exceeded"
)

// KnownCode reports whether code is one of the link's error codes.
func KnownCode(code string) bool {
	switch code {
	case CodeBadFrame, CodeUnknownMethod, CodeNotGranted, CodeConsentRequired, CodeConsentDenied,
		CodeUnknownContext, CodeDuplicate, CodeNoKernel, CodeTimeout, CodeCancelled,
		CodeConfirmationSkipped, CodeInternal, CodeQuotaExceeded:
		return true
	}
	return false
}

// Error is the wire error {code, message} of replies and tool results,
// and a Go error callers can return as is.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf is an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FrameError is a line that is not a valid frame (bad_frame). ReqID is
// the line's req_id when well-formed, so the app knows what was refused.
type FrameError struct {
	ReqID  string
	Reason string
}

func (e *FrameError) Error() string { return "bad_frame: " + e.Reason }

// ErrFrameTooLong is Reader.Next's error for a line over its cap; the
// rest of that line is skipped.
var ErrFrameTooLong = errors.New("frame over the size cap")

// Up is a frame an app sends: *Request or *ToolResult.
type Up interface{ upFrame() }

// Request calls a method of docs/protocol.md. Args is the raw args
// object, nil when the frame had none.
type Request struct {
	ReqID  string
	Method string
	Args   json.RawMessage
}

// ToolResult answers a tool_call in exactly one form: AwaitingConfirmation;
// OK with Data (nil when absent); or !OK with Error.
type ToolResult struct {
	CallID               string
	AwaitingConfirmation bool
	OK                   bool
	Data                 json.RawMessage
	Error                *Error
}

func (*Request) upFrame()    {}
func (*ToolResult) upFrame() {}

// Down is a frame the daemon sends to an app: *Reply, *Event, *ToolCall,
// *ToolCancel, *ContextClosed or *ErrorFrame. Their tags are the wire's
// members after "type", in docs/protocol.md's order.
type Down interface{ downFrame() string }

// Reply answers a request, exactly once: OK with Data (nil when absent),
// or !OK with Error.
type Reply struct {
	ReqID string          `json:"req_id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// Event is one streamed event of a turn, in the kernel's order.
type Event struct {
	ReqID string          `json:"req_id"`
	Event json.RawMessage `json:"event"`
}

// ToolCall asks the app to run one of its tools. Account, ContextID and
// Client come from the daemon's records, never from the app.
type ToolCall struct {
	CallID          string          `json:"call_id"`
	Name            string          `json:"name"`
	Args            json.RawMessage `json:"args"`
	Risk            string          `json:"risk"`
	ConfirmRequired bool            `json:"confirm_required"`
	TimeoutMS       int64           `json:"timeout_ms"`
	Account         string          `json:"account"`
	ContextID       string          `json:"context_id"`
	Client          string          `json:"client"`
	Caller          string          `json:"caller"`
}

// ToolCancel withdraws a call; nothing more is sent for it.
type ToolCancel struct {
	CallID string `json:"call_id"`
	Reason string `json:"reason"`
}

// ContextClosed tells the app a context it opened is gone.
type ContextClosed struct {
	ContextID string `json:"context_id"`
	Reason    string `json:"reason"`
}

// ErrorFrame refuses a line that was not accepted as a request (bad_frame,
// duplicate). ReqID is empty when the line named none.
type ErrorFrame struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	ReqID   string `json:"req_id,omitempty"`
}

func (*Reply) downFrame() string         { return TypeReply }
func (*Event) downFrame() string         { return TypeEvent }
func (*ToolCall) downFrame() string      { return TypeToolCall }
func (*ToolCancel) downFrame() string    { return TypeToolCancel }
func (*ContextClosed) downFrame() string { return TypeContextClosed }
func (*ErrorFrame) downFrame() string    { return TypeError }

// ValidID reports whether s is a valid req_id, call_id or context_id: 1
// to 128 printable ASCII characters.
func ValidID(s string) bool {
	return len(s) > 0 && len(s) <= 128 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e })
}
