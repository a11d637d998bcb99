package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/internal/strictjson"
)

// ParseLine classifies one hub line (without its newline): a peer-link
// frame is decoded strictly into up; any other well-formed JSON object is
// pass-through, its bytes for the shell unchanged; anything else is a
// *FrameError.
func ParseLine(line []byte) (up Up, passthrough bool, err error) {
	// strictjson words what is not JSON, holds the depth limit (jsonv2
	// has none short of 10,000) and hands back the top-level members.
	var few [4]strictjson.Member
	top, err := strictjson.Object(line, few[:0])
	if err != nil {
		return nil, false, &FrameError{Reason: frameJSONError(line, err).Error()}
	}
	for _, m := range top {
		var reason string
		switch name := string(m.Name); {
		case name == Envelope && len(top) > 1:
			reason = "unknown top-level member " + strconv.Quote(firstOther(top, Envelope)) + " beside " + Envelope
		case name == Envelope:
			up, err := decodeEnvelope(m.Value)
			if err == nil {
				return up, false, nil
			}
			reason = err.Error()
		case strings.EqualFold(name, Envelope):
			// The envelope but for case is a mistyped peer frame: the app
			// hears bad_frame rather than its request vanishing into the
			// shell.
			reason = "top-level key " + strconv.Quote(name) + " is not " + strconv.Quote(Envelope) + " (keys are case-sensitive)"
		default:
			continue
		}
		return nil, false, &FrameError{ReqID: attributableReqID(m.Value), Reason: reason}
	}
	return nil, true, nil
}

// firstOther is the least name other than except, so that a refusal
// names the same member whatever the order written.
func firstOther(members []strictjson.Member, except string) string {
	first := ""
	for _, m := range members {
		if k := string(m.Name); k != except && (first == "" || k < first) {
			first = k
		}
	}
	return first
}

// upWire is every member an up frame may have, errorWire a tool result's
// error; text and flag remember being set and refuse null.
type (
	upWire struct {
		Type                 text           `json:"type"`
		ReqID                text           `json:"req_id"`
		Method               text           `json:"method"`
		Args                 jsontext.Value `json:"args"`
		CallID               text           `json:"call_id"`
		AwaitingConfirmation flag           `json:"awaiting_confirmation"`
		OK                   flag           `json:"ok"`
		Data                 jsontext.Value `json:"data"`
		Error                jsontext.Value `json:"error"` // read when ok is false
	}
	errorWire struct {
		Code    text `json:"code"`
		Message text `json:"message"`
	}
	text struct {
		s   string
		set bool
	}
	flag struct{ v, set bool }
)

// wantError is a member of the wrong JSON type; its text ends the reason.
type wantError string

func (e wantError) Error() string { return string(e) }

func (t *text) UnmarshalJSONFrom(d *jsontext.Decoder) error {
	if d.PeekKind() != '"' {
		return wantError("want a string")
	}
	tok, err := d.ReadToken()
	t.s, t.set = tok.String(), err == nil
	return err
}

func (f *flag) UnmarshalJSONFrom(d *jsontext.Decoder) error {
	if k := d.PeekKind(); k != 't' && k != 'f' {
		return wantError("want true or false")
	}
	tok, err := d.ReadToken()
	f.v, f.set = tok.Bool(), err == nil
	return err
}

// strict reads every frame and args object: unknown members refused (see
// the package doc), names exact. The bytes were checked to be UTF-8
// first: AllowInvalidUTF8 only lets through a \u escape of half a
// surrogate pair, which encoding/json has always taken (as U+FFFD).
var strict = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsontext.AllowInvalidUTF8(true))

func unmarshal(data []byte, v any) error { return jsonv2.Unmarshal(data, v, strict) }

// wireRefusal words jsonv2's refusal of the value at path at as bad_frame
// reasons have always read (docs/protocol.md): `octos_peer: "ok": want
// true or false`, `octos_peer.error: unknown member "app"`.
func wireRefusal(err error, at ...string) error {
	var se *jsonv2.SemanticError
	if !errors.As(err, &se) {
		return err
	}
	tokens := slices.AppendSeq(at, se.JSONPointer.Tokens())
	if len(tokens) == 0 {
		return err
	}
	where, name := strings.Join(tokens[:len(tokens)-1], "."), tokens[len(tokens)-1]
	if errors.Is(se.Err, jsonv2.ErrUnknownName) {
		return fmt.Errorf("%s: unknown member %q", where, name)
	}
	want := "want an object" // an envelope or args that is not one
	var we wantError
	if errors.As(se.Err, &we) {
		want = string(we)
	}
	if where == "" {
		return errors.New(name + ": " + want)
	}
	return fmt.Errorf("%s: %q: %s", where, name, want)
}

// decodeEnvelope reads the envelope's value v, checks its members
// against its type and makes the frame. jsonv2's strings and values are
// copies: the frame does not alias the line, which the caller's reader
// reuses.
func decodeEnvelope(v []byte) (Up, error) {
	if v[0] != '{' {
		return nil, errors.New(Envelope + ": want an object")
	}
	var u upWire
	if err := unmarshal(v, &u); err != nil {
		return nil, wireRefusal(err, Envelope)
	}
	t := u.Type.s
	switch {
	case !u.Type.set:
		return nil, errors.New(Envelope + `: missing "type"`)
	case t != TypeRequest && t != TypeToolResult:
		return nil, fmt.Errorf("%s: unknown type %q (want %q or %q)", Envelope, t, TypeRequest, TypeToolResult)
	}
	if n := u.stray(t); n != "" {
		return nil, fmt.Errorf("%s: unknown member %q", Envelope, n)
	}
	if t == TypeToolResult {
		if err := u.CallID.id(Envelope, "call_id"); err != nil {
			return nil, err
		}
		r := &ToolResult{CallID: u.CallID.s}
		return r, u.outcome(r)
	}
	if err := u.ReqID.id(Envelope, "req_id"); err != nil {
		return nil, err
	}
	switch {
	case !u.Method.set:
		return nil, errors.New(Envelope + `: missing "method"`)
	case u.Method.s == "":
		return nil, errors.New(Envelope + `: empty "method"`)
	case u.Args != nil && u.Args.Kind() != '{':
		return nil, errors.New(Envelope + `: "args": want an object`)
	}
	return &Request{ReqID: u.ReqID.s, Method: u.Method.s, Args: json.RawMessage(u.Args)}, nil
}

// stray is the least member that a frame of type t does not have.
func (u *upWire) stray(t string) string {
	for _, m := range []struct {
		name           string
		set, ofRequest bool
	}{
		{"args", u.Args != nil, true},
		{"awaiting_confirmation", u.AwaitingConfirmation.set, false},
		{"call_id", u.CallID.set, false},
		{"data", u.Data != nil, false},
		{"error", u.Error != nil, false},
		{"method", u.Method.set, true},
		{"ok", u.OK.set, false},
		{"req_id", u.ReqID.set, true},
	} {
		if m.set && m.ofRequest != (t == TypeRequest) {
			return m.name
		}
	}
	return ""
}

// id refuses the id member name of object where when missing or invalid.
func (t text) id(where, name string) error {
	switch {
	case !t.set:
		return fmt.Errorf("%s: missing %q", where, name)
	case !ValidID(t.s):
		return fmt.Errorf("%s: %q: want 1 to 128 printable ASCII characters", where, name)
	}
	return nil
}

// outcome reads a tool_result's outcome: exactly one of
// {awaiting_confirmation: true}, {ok: true, data?}, {ok: false, error}.
func (u *upWire) outcome(r *ToolResult) error {
	const awaiting = "awaiting_confirmation"
	switch {
	case u.AwaitingConfirmation.set && !u.AwaitingConfirmation.v:
		return fmt.Errorf("%s: %q: only true is meaningful; send ok instead", Envelope, awaiting)
	case u.AwaitingConfirmation.set:
		for _, m := range []struct {
			name string
			set  bool
		}{{"ok", u.OK.set}, {"data", u.Data != nil}, {"error", u.Error != nil}} {
			if m.set {
				return fmt.Errorf("%s: %q cannot go with %q", Envelope, m.name, awaiting)
			}
		}
		r.AwaitingConfirmation = true
		return nil
	case !u.OK.set:
		return fmt.Errorf("%s: missing %q", Envelope, "ok")
	case u.OK.v && u.Error != nil:
		return errors.New(Envelope + `: "error" cannot go with "ok": true`)
	case u.OK.v:
		r.OK, r.Data = true, json.RawMessage(u.Data)
		return nil
	case u.Data != nil:
		return errors.New(Envelope + `: "data" cannot go with "ok": false`)
	case u.Error == nil:
		return fmt.Errorf("%s: missing %q", Envelope, "error")
	}
	var e errorWire
	const where = Envelope + ".error"
	switch err := unmarshal(u.Error, &e); {
	case u.Error.Kind() != '{': // null too: jsonv2 would read it as {}
		return errors.New(where + ": want an object")
	case err != nil:
		return wireRefusal(err, Envelope, "error")
	case !e.Code.set:
		return fmt.Errorf("%s: missing %q", where, "code")
	case !e.Message.set:
		return fmt.Errorf("%s: missing %q", where, "message")
	case e.Code.s == "":
		return fmt.Errorf("%s: %q: empty code", Envelope, "error")
	}
	r.Error = &Error{Code: e.Code.s, Message: e.Message.s}
	return nil
}

// CheckValue verifies that kernel data or an event is exactly one JSON
// value, strictly (no duplicate key, at most strictjson.MaxDepth levels).
// encoding/json would keep the last of two duplicate keys and fold case,
// letting a sender smuggle a member past a reader that sees the other.
func CheckValue(data []byte) error { return frameJSONError(data, strictjson.Check(data)) }

// Members returns the members of a JSON object, checked; the values
// alias data.
func Members(data []byte) (map[string]json.RawMessage, error) {
	list, err := strictjson.Object(data, nil)
	if err != nil {
		return nil, frameJSONError(data, err)
	}
	m := make(map[string]json.RawMessage, len(list))
	for _, mm := range list {
		m[string(mm.Name)] = mm.Value
	}
	return m, nil
}

// frameJSONError words strictjson's refusal of data as bad_frame reasons
// have always read (docs/protocol.md).
func frameJSONError(data []byte, err error) error {
	if err == nil {
		return nil // and no *strictjson.Error escapes for errors.As
	}
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case strictjson.Empty:
		return errors.New("empty line: want one JSON value")
	case strictjson.Truncated:
		return errors.New("malformed JSON: the line ends inside a value")
	case strictjson.Syntax:
		return fmt.Errorf("malformed JSON: %v at byte %d", e, e.Offset)
	case strictjson.Trailing:
		if strictjson.Check(data[e.Offset:]) == nil {
			return errors.New("a second JSON value follows the object on the same line")
		}
		return fmt.Errorf("malformed JSON: text after the value at byte %d", e.Offset)
	}
	return err // not valid UTF-8, not a JSON object, duplicate key "k", nested deeper than N levels
}

// attributableReqID is an envelope's req_id when well-formed, so that a
// refusal can name the request it refuses.
func attributableReqID(env []byte) string {
	var e struct {
		ReqID string `json:"req_id"`
	}
	if jsonv2.Unmarshal(env, &e, jsontext.AllowInvalidUTF8(true)) != nil || !ValidID(e.ReqID) {
		return ""
	}
	return e.ReqID
}
