package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// EncodeDown encodes a daemon → app frame as one line: encoding/json's
// bytes, HTML escapes and all, members in docs/protocol.md's order, as
// testdata/golden pins.
func EncodeDown(f Down) ([]byte, error) {
	var v any
	t := f.downFrame()
	switch f := f.(type) {
	case *Reply:
		r := reply{Type: t, ReqID: f.ReqID, OK: f.OK}
		switch {
		case f.OK:
			r.Data = f.Data
		case f.Error == nil:
			return nil, errors.New(`encode frame: "ok": false needs an error`)
		default:
			r.Error = &Error{Code: f.Error.Code, Message: cutMessage(f.Error.Message)}
		}
		v = r
	case *Event:
		v = event{t, f.ReqID, f.Event}
	case *ToolCall:
		args := f.Args
		if args == nil {
			args = json.RawMessage("{}")
		}
		v = toolCall{t, f.CallID, f.Name, args, f.Risk, f.ConfirmRequired, f.TimeoutMS, f.Account, f.ContextID, f.Client, f.Caller}
	case *ToolCancel:
		v = toolCancel{t, f.CallID, f.Reason}
	case *ContextClosed:
		v = contextClosed{t, f.ContextID, f.Reason}
	case *ErrorFrame:
		v = errorFrame{t, f.Code, cutMessage(f.Message), f.ReqID}
	default:
		return nil, fmt.Errorf("encode: unknown down frame %T", f)
	}
	b, err := json.Marshal(envelope{v})
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	return append(b, '\n'), nil
}

// maxMessage bounds an error's message in a frame. A message may quote
// what the app sent, which quoting and escapes can grow sixfold: cut, the
// refusal of any line an app may send still fits a frame.
const maxMessage = 1024

// cutMessage cuts m to maxMessage bytes at a character's start, adding "…".
func cutMessage(m string) string {
	if len(m) <= maxMessage {
		return m
	}
	i := maxMessage
	for i > 0 && !utf8.RuneStart(m[i]) {
		i--
	}
	return m[:i] + "…"
}

// The down frames as encoding/json writes them.
type (
	envelope struct {
		Peer any `json:"octos_peer"`
	}
	reply struct {
		Type  string          `json:"type"`
		ReqID string          `json:"req_id"`
		OK    bool            `json:"ok"`
		Data  json.RawMessage `json:"data,omitempty"`
		Error *Error          `json:"error,omitempty"`
	}
	event struct {
		Type  string          `json:"type"`
		ReqID string          `json:"req_id"`
		Event json.RawMessage `json:"event"`
	}
	toolCall struct {
		Type            string          `json:"type"`
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
	toolCancel struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Reason string `json:"reason"`
	}
	contextClosed struct {
		Type      string `json:"type"`
		ContextID string `json:"context_id"`
		Reason    string `json:"reason"`
	}
	errorFrame struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		ReqID   string `json:"req_id,omitempty"`
	}
)
