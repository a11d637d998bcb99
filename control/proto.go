package control

import (
	"encoding/json"
	"fmt"
)

// MaxLine caps one control-socket line in either direction. A longer
// request is answered bad_request and skipped up to its newline.
const MaxLine = 1 << 20

// Request is one line from a client: {"id": N, "op": "...", "args": {...}}.
type Request struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers exactly one Request.
type Response struct {
	ID    int64           `json:"id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// Error is the error member of a failed Response. It is also a Go error,
// so the client returns it as is and callers branch on Code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Error codes of the control socket. The peer link's codes (SPEC §3) are
// used as they are where an op relays them.
const (
	CodeBadRequest      = "bad_request"      // the line is not a request, or its args are wrong
	CodeUnknownOp       = "unknown_op"       // no such op
	CodeUnknownApp      = "unknown_app"      // no app with that id in the manifest
	CodeInvalidManifest = "invalid_manifest" // reload refused: the manifest has errors
	CodeFailed          = "failed"           // the app could not reach the asked state
	CodeInternal        = "internal"
)

// Ops of the control socket (SPEC §4).
const (
	OpStatus    = "status"
	OpStart     = "start"
	OpStop      = "stop"
	OpRestart   = "restart"
	OpLogs      = "logs"
	OpSubscribe = "subscribe"
	OpReload    = "reload"
)

// Event topics a subscriber may ask for.
const (
	TopicState    = "state"
	TopicApproval = "approval"
	TopicAppFrame = "app.frame"
)
