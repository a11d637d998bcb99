package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"octosup/internal/strictjson"
)

// The encoders write members in the order of docs/protocol.md's tables, compact,
// one line with its newline: the golden files in testdata/golden pin these
// bytes.

// EncodeDown encodes a daemon → app frame as one line.
func EncodeDown(f Down) ([]byte, error) {
	size := 128
	if c, ok := f.(*ToolCall); ok {
		// The one frame every call sends: its buffer is sized once.
		size += len(c.CallID) + len(c.Name) + len(c.Args) + len(c.Account) + len(c.ContextID) + len(c.Client) + len(c.Caller) + 64
	}
	e := newEnc(f.downFrame(), size)
	switch f := f.(type) {
	case *Reply:
		e.str("req_id", f.ReqID)
		e.outcome(f.OK, f.Data, f.Error)
	case *Event:
		e.str("req_id", f.ReqID)
		e.raw("event", f.Event, true)
	case *ToolCall:
		e.str("call_id", f.CallID)
		e.str("name", f.Name)
		args := f.Args
		if args == nil {
			args = json.RawMessage("{}")
		}
		e.raw("args", args, true)
		e.str("risk", f.Risk)
		e.boolean("confirm_required", f.ConfirmRequired)
		e.key("timeout_ms")
		e.b = strconv.AppendInt(e.b, f.TimeoutMS, 10)
		e.str("account", f.Account)
		e.str("context_id", f.ContextID)
		e.str("client", f.Client)
		e.str("caller", f.Caller)
	case *ToolCancel:
		e.str("call_id", f.CallID)
		e.str("reason", f.Reason)
	case *ContextClosed:
		e.str("context_id", f.ContextID)
		e.str("reason", f.Reason)
	case *ErrorFrame:
		e.str("code", f.Code)
		e.str("message", f.Message)
		if f.ReqID != "" {
			e.str("req_id", f.ReqID)
		}
	default:
		return nil, fmt.Errorf("encode: unknown down frame %T", f)
	}
	return e.finish()
}

type enc struct {
	b   []byte
	err error
}

func newEnc(typ string, size int) enc {
	e := enc{b: make([]byte, 0, size)}
	e.b = append(e.b, `{"`+Envelope+`":{"type":`...)
	e.b = strconv.AppendQuote(e.b, typ) // frame types are plain ASCII
	return e
}

func (e *enc) key(k string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *enc) str(k, v string) {
	e.key(k)
	e.b = strictjson.AppendString(e.b, v)
}

func (e *enc) boolean(k string, v bool) {
	e.key(k)
	e.b = strconv.AppendBool(e.b, v)
}

func (e *enc) raw(k string, v json.RawMessage, required bool) {
	if v == nil {
		if required {
			v = json.RawMessage("null")
		} else {
			return
		}
	}
	e.key(k)
	var err error
	if e.b, err = strictjson.AppendRaw(e.b, v); err != nil && e.err == nil {
		e.err = fmt.Errorf("%s: %w", k, err)
	}
}

func (e *enc) outcome(ok bool, data json.RawMessage, werr *Error) {
	e.boolean("ok", ok)
	if ok {
		e.raw("data", data, false)
		return
	}
	if werr == nil {
		if e.err == nil {
			e.err = errors.New(`"ok": false needs an error`)
		}
		return
	}
	e.key("error")
	e.b = append(e.b, `{"code":`...)
	e.b = strictjson.AppendString(e.b, werr.Code)
	e.b = append(e.b, `,"message":`...)
	e.b = strictjson.AppendString(e.b, werr.Message)
	e.b = append(e.b, '}')
}

func (e *enc) finish() ([]byte, error) {
	if e.err != nil {
		return nil, fmt.Errorf("encode frame: %w", e.err)
	}
	return append(e.b, '}', '}', '\n'), nil
}
