// Package frametest plays the app's side of the peer link for tests: it
// encodes up frames and decodes down frames, which the daemon never does.
// It is a second implementation, written with encoding/json/v2
// (go-json-experiment) and struct tags of its own, so that a test
// reading the daemon's frames with it holds package frame's encoder
// (encoding/json v1 and its own structs) to the documented shape
// (docs/protocol.md) instead of to itself: the two sets of structs are
// kept apart on purpose. No binary imports it.
package frametest

import (
	"errors"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/peer/internal/frame"
)

// strict is the daemon's rule for what apps send, applied to what it
// sends: no unknown member at any depth (duplicates and case-folded
// names are json/v2's errors by default).
var strict = json.RejectUnknownMembers(true)

// The frames' members in docs/protocol.md's order, which is the order the
// encoders write. omitzero: an absent member stays absent.
type (
	request struct {
		Type   string         `json:"type"`
		ReqID  string         `json:"req_id"`
		Method string         `json:"method"`
		Args   jsontext.Value `json:"args,omitzero"`
	}
	outcome struct {
		OK    *bool          `json:"ok,omitzero"`
		Data  jsontext.Value `json:"data,omitzero"`
		Error *frame.Error   `json:"error,omitzero"`
	}
	toolResult struct {
		Type     string `json:"type"`
		CallID   string `json:"call_id"`
		Awaiting bool   `json:"awaiting_confirmation,omitzero"`
		outcome
	}
	reply struct {
		Type  string `json:"type"`
		ReqID string `json:"req_id"`
		outcome
	}
	event struct {
		Type  string         `json:"type"`
		ReqID string         `json:"req_id"`
		Event jsontext.Value `json:"event"`
	}
	toolCall struct {
		Type            string         `json:"type"`
		CallID          string         `json:"call_id"`
		Name            string         `json:"name"`
		Args            jsontext.Value `json:"args"`
		Risk            string         `json:"risk"`
		ConfirmRequired bool           `json:"confirm_required"`
		TimeoutMS       int64          `json:"timeout_ms"`
		Account         string         `json:"account"`
		ContextID       string         `json:"context_id"`
		Client          string         `json:"client"`
		Caller          string         `json:"caller"`
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
		ReqID   string `json:"req_id,omitzero"`
	}
)

// These are inline: their members sit beside the frame's own.
func (o *outcome) check() error {
	switch {
	case o.OK == nil:
		return errors.New(`no "ok"`)
	case *o.OK && o.Error != nil:
		return errors.New(`"error" with "ok": true`)
	case !*o.OK && (o.Error == nil || o.Error.Code == ""):
		return errors.New(`"ok": false without an error code`)
	case !*o.OK && o.Data != nil:
		return errors.New(`"data" with "ok": false`)
	}
	return nil
}

// EncodeUp encodes an app → daemon frame as one line, escaped as the
// daemon's encoding/json bytes are.
func EncodeUp(f frame.Up) ([]byte, error) {
	var v any
	switch f := f.(type) {
	case *frame.Request:
		v = request{frame.TypeRequest, f.ReqID, f.Method, jsontext.Value(f.Args)}
	case *frame.ToolResult:
		r := toolResult{Type: frame.TypeToolResult, CallID: f.CallID, Awaiting: f.AwaitingConfirmation}
		if !f.AwaitingConfirmation {
			r.outcome = outcome{&f.OK, jsontext.Value(f.Data), f.Error}
		}
		v = r
	default:
		return nil, fmt.Errorf("encode: unknown up frame %T", f)
	}
	b, err := json.Marshal(map[string]any{frame.Envelope: v}, jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeDown decodes a daemon → app frame: every member the type has,
// nothing else, ids the protocol allows.
func DecodeDown(line []byte) (frame.Down, error) {
	var top struct {
		Envelope jsontext.Value `json:"octos_peer"`
	}
	if err := json.Unmarshal(line, &top, strict); err != nil {
		return nil, err
	}
	if top.Envelope.Kind() != '{' {
		return nil, errors.New("not a peer-link frame: no " + frame.Envelope + " object")
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(top.Envelope, &members); err != nil {
		return nil, err
	}
	var typ string
	if err := json.Unmarshal(members["type"], &typ); err != nil {
		return nil, fmt.Errorf("type: %w", err)
	}
	d, ids, err := decodeDown(typ, top.Envelope)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	if err := required(typ, members); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id != nil && !frame.ValidID(*id) {
			return nil, fmt.Errorf("%s: id %q is not 1 to 128 printable ASCII characters", typ, *id)
		}
	}
	return d, nil
}

// decodeDown decodes the envelope as a frame of type typ, and says which
// of its members are ids (nil: an optional one that is absent).
func decodeDown(typ string, env jsontext.Value) (frame.Down, []*string, error) {
	switch typ {
	case frame.TypeReply:
		var r reply
		if err := json.Unmarshal(env, &r, strict); err != nil {
			return nil, nil, err
		}
		if err := r.check(); err != nil {
			return nil, nil, err
		}
		return &frame.Reply{ReqID: r.ReqID, OK: *r.OK, Data: []byte(r.Data), Error: r.Error}, []*string{&r.ReqID}, nil
	case frame.TypeEvent:
		var e event
		err := json.Unmarshal(env, &e, strict)
		return &frame.Event{ReqID: e.ReqID, Event: []byte(e.Event)}, []*string{&e.ReqID}, err
	case frame.TypeToolCall:
		var c toolCall
		err := json.Unmarshal(env, &c, strict)
		return &frame.ToolCall{CallID: c.CallID, Name: c.Name, Args: []byte(c.Args), Risk: c.Risk, ConfirmRequired: c.ConfirmRequired,
			TimeoutMS: c.TimeoutMS, Account: c.Account, ContextID: c.ContextID, Client: c.Client, Caller: c.Caller}, []*string{&c.CallID, &c.ContextID}, err
	case frame.TypeToolCancel:
		var c toolCancel
		err := json.Unmarshal(env, &c, strict)
		return &frame.ToolCancel{CallID: c.CallID, Reason: c.Reason}, []*string{&c.CallID}, err
	case frame.TypeContextClosed:
		var c contextClosed
		err := json.Unmarshal(env, &c, strict)
		return &frame.ContextClosed{ContextID: c.ContextID, Reason: c.Reason}, []*string{&c.ContextID}, err
	case frame.TypeError:
		var e errorFrame
		err := json.Unmarshal(env, &e, strict)
		var id *string
		if e.ReqID != "" {
			id = &e.ReqID
		}
		return &frame.ErrorFrame{Code: e.Code, Message: e.Message, ReqID: e.ReqID}, []*string{id}, err
	}
	return nil, nil, errors.New("unknown frame type")
}

// required checks that every member of typ's frame that has no omitzero
// is there: json/v2 leaves an absent member at its zero value.
func required(typ string, members map[string]jsontext.Value) error {
	need := map[string][]string{
		frame.TypeReply:         {"req_id"},
		frame.TypeEvent:         {"req_id", "event"},
		frame.TypeToolCall:      {"call_id", "name", "args", "risk", "confirm_required", "timeout_ms", "account", "context_id", "client", "caller"},
		frame.TypeToolCancel:    {"call_id", "reason"},
		frame.TypeContextClosed: {"context_id", "reason"},
		frame.TypeError:         {"code", "message"},
	}[typ]
	for _, name := range need {
		if _, ok := members[name]; !ok {
			return fmt.Errorf("%s: no %q", typ, name)
		}
	}
	if typ == frame.TypeToolCall && members["args"].Kind() != '{' {
		return errors.New(`tool_call: "args" is not an object`)
	}
	// null is json/v2's zero value for a string; an event may be null.
	if i := slices.IndexFunc(need, func(n string) bool { return n != "event" && string(members[n]) == "null" }); i >= 0 {
		return fmt.Errorf("%s: %q is null", typ, need[i])
	}
	return nil
}
