package peer

// The app's side of the peer link, which the daemon never plays: encoding
// up frames, decoding down ones. It is a second implementation, on
// encoding/json/v2 with structs of its own, kept apart from package frame
// on purpose: a test reading the daemon's frames with it holds frame's
// encoder to the documented shape (docs/protocol.md), not to itself.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/peer/internal/frame"
)

// strictDown is the daemon's rule for what apps send, applied to what it
// sends: no unknown member at any depth (duplicate and case-folded names
// are json/v2's errors by default).
var strictDown = jsonv2.RejectUnknownMembers(true)

// The frames' members in docs/protocol.md's order, which the encoders
// write. omitzero: an absent member stays absent.
type (
	wireRequest struct {
		Type   string         `json:"type"`
		ReqID  string         `json:"req_id"`
		Method string         `json:"method"`
		Args   jsontext.Value `json:"args,omitzero"`
	}
	wireOutcome struct { // inline: its members sit beside the frame's own
		OK    *bool          `json:"ok,omitzero"`
		Data  jsontext.Value `json:"data,omitzero"`
		Error *frame.Error   `json:"error,omitzero"`
	}
	wireToolResult struct {
		Type     string `json:"type"`
		CallID   string `json:"call_id"`
		Awaiting bool   `json:"awaiting_confirmation,omitzero"`
		wireOutcome
	}
	wireReply struct {
		Type  string `json:"type"`
		ReqID string `json:"req_id"`
		wireOutcome
	}
	wireEvent struct {
		Type  string         `json:"type"`
		ReqID string         `json:"req_id"`
		Event jsontext.Value `json:"event"`
	}
	wireToolCall struct {
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
	wireToolCancel struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Reason string `json:"reason"`
	}
	wireContextClosed struct {
		Type      string `json:"type"`
		ContextID string `json:"context_id"`
		Reason    string `json:"reason"`
	}
	wireErrorFrame struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		ReqID   string `json:"req_id,omitzero"`
	}
)

func (o *wireOutcome) check() error {
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

// encodeUp encodes an app → daemon frame as one line, escaped as the
// daemon's encoding/json bytes are.
func encodeUp(f frame.Up) ([]byte, error) {
	var v any
	switch f := f.(type) {
	case *frame.Request:
		v = wireRequest{frame.TypeRequest, f.ReqID, f.Method, jsontext.Value(f.Args)}
	case *frame.ToolResult:
		r := wireToolResult{Type: frame.TypeToolResult, CallID: f.CallID, Awaiting: f.AwaitingConfirmation}
		if !f.AwaitingConfirmation {
			r.wireOutcome = wireOutcome{&f.OK, jsontext.Value(f.Data), f.Error}
		}
		v = r
	default:
		return nil, fmt.Errorf("encode: unknown up frame %T", f)
	}
	b, err := jsonv2.Marshal(map[string]any{frame.Envelope: v}, jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeDown decodes a daemon → app frame: every member the type has,
// nothing else, ids the protocol allows.
func decodeDown(line []byte) (frame.Down, error) {
	var top struct {
		Envelope jsontext.Value `json:"octos_peer"`
	}
	if err := jsonv2.Unmarshal(line, &top, strictDown); err != nil {
		return nil, err
	}
	if top.Envelope.Kind() != '{' {
		return nil, errors.New("not a peer-link frame: no " + frame.Envelope + " object")
	}
	var members map[string]jsontext.Value
	if err := jsonv2.Unmarshal(top.Envelope, &members); err != nil {
		return nil, err
	}
	var typ string
	if err := jsonv2.Unmarshal(members["type"], &typ); err != nil {
		return nil, fmt.Errorf("type: %w", err)
	}
	d, ids, err := decodeDownAs(typ, top.Envelope)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	if err := requiredMembers(typ, members); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id != nil && !frame.ValidID(*id) {
			return nil, fmt.Errorf("%s: id %q is not 1 to 128 printable ASCII characters", typ, *id)
		}
	}
	return d, nil
}

// decodeDownAs decodes env as a frame of type typ, and says which of its
// members are ids (nil: an optional one that is absent).
func decodeDownAs(typ string, env jsontext.Value) (frame.Down, []*string, error) {
	switch typ {
	case frame.TypeReply:
		var r wireReply
		if err := jsonv2.Unmarshal(env, &r, strictDown); err != nil {
			return nil, nil, err
		}
		if err := r.check(); err != nil {
			return nil, nil, err
		}
		return &frame.Reply{ReqID: r.ReqID, OK: *r.OK, Data: []byte(r.Data), Error: r.Error}, []*string{&r.ReqID}, nil
	case frame.TypeEvent:
		var e wireEvent
		err := jsonv2.Unmarshal(env, &e, strictDown)
		return &frame.Event{ReqID: e.ReqID, Event: []byte(e.Event)}, []*string{&e.ReqID}, err
	case frame.TypeToolCall:
		var c wireToolCall
		err := jsonv2.Unmarshal(env, &c, strictDown)
		return &frame.ToolCall{CallID: c.CallID, Name: c.Name, Args: []byte(c.Args), Risk: c.Risk, ConfirmRequired: c.ConfirmRequired,
			TimeoutMS: c.TimeoutMS, Account: c.Account, ContextID: c.ContextID, Client: c.Client, Caller: c.Caller}, []*string{&c.CallID, &c.ContextID}, err
	case frame.TypeToolCancel:
		var c wireToolCancel
		err := jsonv2.Unmarshal(env, &c, strictDown)
		return &frame.ToolCancel{CallID: c.CallID, Reason: c.Reason}, []*string{&c.CallID}, err
	case frame.TypeContextClosed:
		var c wireContextClosed
		err := jsonv2.Unmarshal(env, &c, strictDown)
		return &frame.ContextClosed{ContextID: c.ContextID, Reason: c.Reason}, []*string{&c.ContextID}, err
	case frame.TypeError:
		var e wireErrorFrame
		err := jsonv2.Unmarshal(env, &e, strictDown)
		var id *string
		if e.ReqID != "" {
			id = &e.ReqID
		}
		return &frame.ErrorFrame{Code: e.Code, Message: e.Message, ReqID: e.ReqID}, []*string{id}, err
	}
	return nil, nil, errors.New("unknown frame type")
}

// requiredMembers checks that every member of typ's frame without
// omitzero is there: json/v2 leaves an absent member at its zero value.
func requiredMembers(typ string, members map[string]jsontext.Value) error {
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

const goldenFrames = "internal/frame/testdata/golden/*.json"

// TestGoldenRoundTrip decodes every golden frame and re-encodes it: the
// bytes must come back exactly, each direction through both
// implementations (frame decodes up frames and encodes down ones, this
// file the other way).
func TestGoldenRoundTrip(t *testing.T) {
	files, err := filepath.Glob(goldenFrames)
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			line := bytes.TrimSuffix(want, []byte("\n"))
			var got []byte
			if strings.HasPrefix(filepath.Base(file), "up_") {
				f, _, err := frame.ParseLine(line)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				seen[upType(f)] = true
				got, err = encodeUp(f)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
			} else {
				f, err := decodeDown(line)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				seen[downType(f)] = true
				got, err = frame.EncodeDown(f)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("re-encoded\n got %s\nwant %s", got, want)
			}
		})
	}
	for _, typ := range []string{frame.TypeRequest, frame.TypeToolResult, frame.TypeReply, frame.TypeEvent, frame.TypeToolCall, frame.TypeToolCancel, frame.TypeContextClosed, frame.TypeError} {
		if !seen[typ] {
			t.Errorf("no golden file for frame type %s", typ)
		}
	}
}

func upType(f frame.Up) string {
	if _, ok := f.(*frame.Request); ok {
		return frame.TypeRequest
	}
	return frame.TypeToolResult
}

// downType is the type member EncodeDown writes for f.
func downType(f frame.Down) string {
	b, _ := frame.EncodeDown(f)
	var v struct {
		P struct {
			Type string `json:"type"`
		} `json:"octos_peer"`
	}
	_ = json.Unmarshal(b, &v)
	return v.P.Type
}

func addGoldenSeeds(f *testing.F) {
	files, _ := filepath.Glob(goldenFrames)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzDecodeUp decodes arbitrary lines as app frames: no panic, and any
// accepted frame re-encodes to a line that decodes to the same encoding.
func FuzzDecodeUp(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"octos_peer":{"type":"request","req_id":"r","method":"m","args":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c","ok":false,"error":{"code":"x","message":"y"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		up, pass, err := frame.ParseLine(line)
		if err != nil || pass {
			return
		}
		once, err := encodeUp(up)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, pass, err := frame.ParseLine(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil || pass {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		twice, err := encodeUp(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q (%v)", once, twice, err)
		}
	})
}

// FuzzDecodeDown does the same for daemon frames: what decodeDown
// accepts, the daemon's encoder writes, and the bytes are stable.
func FuzzDecodeDown(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		d, err := decodeDown(line)
		if err != nil {
			return
		}
		once, err := frame.EncodeDown(d)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, err := decodeDown(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		if twice, _ := frame.EncodeDown(again); !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q", once, twice)
		}
	})
}
