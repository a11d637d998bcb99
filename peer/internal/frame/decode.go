package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"octosup/internal/strictjson"
)

// ParseLine classifies one hub line (without its newline). A peer-link
// frame is decoded strictly into up; any other well-formed JSON object is
// pass-through (passthrough true, up nil) and its bytes go to the shell
// unchanged. Anything else is a *FrameError.
func ParseLine(line []byte) (up Up, passthrough bool, err error) {
	// The line and its envelope are read in one pass, into arrays kept
	// for the next line: no allocation for the members of the usual one.
	sc := scratches.Get().(*scratch)
	defer sc.release()
	top, members, err := strictjson.ObjectIn(line, Envelope, sc.top[:0], sc.env[:0])
	if err != nil {
		return nil, false, &FrameError{Reason: frameJSONError(line, err).Error()}
	}
	env, ok := fields(top).get(Envelope)
	if !ok {
		// A key that is the envelope but for case is a mistyped peer
		// frame, not a pass-through one: the app hears bad_frame instead
		// of its request vanishing into the shell.
		for _, m := range top {
			if k := string(m.Name); strings.EqualFold(k, Envelope) {
				// Still attributed: the app meant a peer-link frame, and
				// the rule for req_id is the same as for a correct key.
				return nil, false, &FrameError{ReqID: attributableReqID(m.Value), Reason: "top-level key " + strconv.Quote(k) + " is not " + strconv.Quote(Envelope) + " (keys are case-sensitive)"}
			}
		}
		return nil, true, nil
	}
	if len(top) > 1 {
		return nil, false, &FrameError{ReqID: attributableReqID(env), Reason: "unknown top-level member " + strconv.Quote(fields(top).firstOther(Envelope)) + " beside " + Envelope}
	}
	o := object{where: Envelope, m: members}
	if env[0] != '{' {
		o.err = errors.New(Envelope + ": want an object")
	}
	up, err = decodeUp(&o)
	if err != nil {
		return nil, false, &FrameError{ReqID: attributableReqID(env), Reason: err.Error()}
	}
	return up, false, nil
}

// scratch holds the members of one line while it is decoded; the
// decoded frame keeps copies.
type scratch struct {
	top [2]strictjson.Member
	env [10]strictjson.Member // a tool_call's members, the most of any
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func (sc *scratch) release() {
	*sc = scratch{} // not keep the line alive
	scratches.Put(sc)
}

// fields are an object's members. Objects in frames have a few: a look
// through them is quicker than a map's hashing, and costs no allocation.
type fields []strictjson.Member

func (f fields) get(name string) (json.RawMessage, bool) {
	for _, m := range f {
		if string(m.Name) == name {
			return m.Value, true
		}
	}
	return nil, false
}

func (f *fields) del(name string) {
	for i, m := range *f {
		if string(m.Name) == name {
			last := len(*f) - 1
			(*f)[i] = (*f)[last]
			*f = (*f)[:last]
			return
		}
	}
}

// firstOther is the first name but except in sort order, so that a
// refusal names the same member whatever the order written.
func (f fields) firstOther(except string) string {
	first := ""
	for _, m := range f {
		if string(m.Name) != except && (first == "" || string(m.Name) < first) {
			first = string(m.Name)
		}
	}
	return first
}

// CheckValue verifies that data is exactly one JSON value, strictly
// (strictjson: no duplicate key in any object, at most strictjson.MaxDepth
// levels of nesting), for kernel data and events. encoding/json would
// silently keep the last of two duplicate keys and match keys
// case-insensitively; both would let a sender smuggle a member past a
// reader that sees the other copy.
func CheckValue(data []byte) error { return frameJSONError(data, strictjson.Check(data)) }

// Members returns the members of a JSON object (checking it on the way).
// Their values alias data.
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

// frameJSONError words strictjson's refusal of data the way bad_frame
// reasons have always read (docs/protocol.md).
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

// attributableReqID returns the envelope's req_id when it is a well-formed
// one, so that a refusal can name the request it refuses.
func attributableReqID(env json.RawMessage) string {
	if len(env) == 0 || env[0] != '{' {
		return ""
	}
	var few [8]strictjson.Member
	f, err := strictjson.Object(env, few[:0])
	if err != nil {
		return ""
	}
	var id string
	if raw, ok := fields(f).get("req_id"); ok && len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &id) == nil && ValidID(id) {
		return id
	}
	return ""
}

// object reads the members of one JSON object by their exact names. Every
// getter removes what it read; done reports any member left over, so an
// unknown or case-variant key is an error rather than ignored. Its
// members alias the line they were read from: what a frame keeps is
// copied (string, bytes.Clone).
type object struct {
	where string
	m     fields
	err   error
}

// newObject reads the members of raw, a request's args.
func newObject(where string, raw json.RawMessage) *object {
	h := new(struct {
		o   object
		few [10]strictjson.Member
	})
	h.o = objectOf(where, raw, h.few[:0])
	return &h.o
}

// objectOf reads raw's members into dst.
func objectOf(where string, raw json.RawMessage, dst []strictjson.Member) object {
	if len(raw) == 0 || raw[0] != '{' {
		return object{where: where, err: fmt.Errorf("%s: want an object", where)}
	}
	m, err := strictjson.Object(raw, dst)
	if err != nil {
		return object{where: where, err: frameJSONError(raw, err)}
	}
	return object{where: where, m: m}
}

func (o *object) fail(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf(o.where+": "+format, args...)
	}
}

func (o *object) take(name string, required bool) (json.RawMessage, bool) {
	if o.err != nil {
		return nil, false
	}
	v, ok := o.m.get(name)
	if !ok {
		if required {
			o.fail("missing %q", name)
		}
		return nil, false
	}
	o.m.del(name)
	return v, true
}

func (o *object) has(name string) bool {
	_, ok := o.m.get(name)
	return ok
}

func (o *object) str(name string, required bool) string {
	v, ok := o.take(name, required)
	if !ok {
		return ""
	}
	if v[0] != '"' {
		o.fail("%q: want a string", name)
		return ""
	}
	// The line was scanned and is valid UTF-8: a string without an
	// escape is its bytes between the quotes.
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1])
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		o.fail("%q: want a string", name)
		return ""
	}
	return s
}

func (o *object) id(name string, required bool) string {
	_, present := o.m.get(name)
	s := o.str(name, required)
	if o.err == nil && present && !ValidID(s) {
		o.fail("%q: want 1 to 128 printable ASCII characters", name)
	}
	return s
}

func (o *object) boolean(name string, required bool) bool {
	v, ok := o.take(name, required)
	if !ok {
		return false
	}
	switch string(v) {
	case "true":
		return true
	case "false":
		return false
	}
	o.fail("%q: want true or false", name)
	return false
}

// raw takes a member of any JSON type.
func (o *object) raw(name string, required bool) json.RawMessage {
	v, _ := o.take(name, required)
	return v
}

func (o *object) obj(name string, required bool) json.RawMessage {
	v, ok := o.take(name, required)
	if ok && v[0] != '{' {
		o.fail("%q: want an object", name)
		return nil
	}
	return v
}

func (o *object) wireError(name string, required bool) *Error {
	v, ok := o.take(name, required)
	if !ok || o.err != nil {
		return nil
	}
	var few [4]strictjson.Member
	eo := objectOf(o.where+"."+name, v, few[:0])
	e := &Error{Code: eo.str("code", true), Message: eo.str("message", true)}
	if err := eo.done(); err != nil {
		o.err = err
		return nil
	}
	if e.Code == "" {
		o.fail("%q: empty code", name)
	}
	return e
}

func (o *object) done() error {
	if o.err != nil {
		return o.err
	}
	if len(o.m) > 0 {
		return fmt.Errorf("%s: unknown member %q", o.where, o.m.firstOther(""))
	}
	return nil
}

// decodeUp decodes the envelope's members. They alias the line, which
// the caller's reader reuses: the frame gets its own copy of each.
func decodeUp(o *object) (Up, error) {
	switch t := o.str("type", true); {
	case o.err != nil:
		return nil, o.err
	case t == TypeRequest:
		r := &Request{ReqID: o.id("req_id", true), Method: o.str("method", true), Args: bytes.Clone(o.obj("args", false))}
		if err := o.done(); err != nil {
			return nil, err
		}
		if r.Method == "" {
			return nil, errors.New(Envelope + `: empty "method"`)
		}
		return r, nil
	case t == TypeToolResult:
		r := &ToolResult{CallID: o.id("call_id", true)}
		if err := toolOutcome(o, r); err != nil {
			return nil, err
		}
		return r, nil
	default:
		return nil, fmt.Errorf("%s: unknown type %q (want %q or %q)", Envelope, t, TypeRequest, TypeToolResult)
	}
}

// toolOutcome reads a tool_result's outcome: exactly one of
// {awaiting_confirmation: true}, {ok: true, data?}, {ok: false, error}.
func toolOutcome(o *object, r *ToolResult) error {
	const awaiting = "awaiting_confirmation"
	if o.has(awaiting) {
		r.AwaitingConfirmation = o.boolean(awaiting, true)
		if o.err == nil && !r.AwaitingConfirmation {
			o.fail("%q: only true is meaningful; send ok instead", awaiting)
		}
		for _, n := range []string{"ok", "data", "error"} {
			if o.has(n) {
				o.fail("%q cannot go with %q", n, awaiting)
			}
		}
		return o.done()
	}
	r.OK = o.boolean("ok", true)
	if o.err != nil {
		return o.err
	}
	if r.OK {
		r.Data = bytes.Clone(o.raw("data", false))
		if o.has("error") {
			o.fail(`"error" cannot go with "ok": true`)
		}
	} else {
		r.Error = o.wireError("error", true)
		if o.has("data") {
			o.fail(`"data" cannot go with "ok": false`)
		}
	}
	return o.done()
}
