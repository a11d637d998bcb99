package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// EncodeDown encodes a daemon → app frame as one line: encoding/json's
// bytes, HTML escapes and all, members in docs/protocol.md's order, as
// testdata/golden pins.
func EncodeDown(f Down) ([]byte, error) {
	switch d := f.(type) {
	case *Reply:
		r := *d
		switch {
		case r.OK:
			r.Error = nil
		case r.Error == nil:
			return nil, errors.New(`encode frame: "ok": false needs an error`)
		default:
			r.Data, r.Error = nil, &Error{Code: r.Error.Code, Message: cutMessage(r.Error.Message)}
		}
		f = &r
	case *ToolCall:
		if d.Args == nil {
			c := *d
			c.Args = json.RawMessage("{}")
			f = &c
		}
	case *ErrorFrame:
		e := *d
		e.Message = cutMessage(e.Message)
		f = &e
	case nil:
		return nil, errors.New("encode: no down frame")
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	// Every frame has a member besides its type: b is {"...":...}.
	line := make([]byte, 0, len(b)+40)
	line = append(append(append(line, `{"`+Envelope+`":{"type":"`...), f.downFrame()...), `",`...)
	return append(append(line, b[1:]...), '}', '\n'), nil
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

// RelayedLen bounds the bytes encoding/json writes for the raw value v,
// as the daemon relays it: each <, > and & becomes a 6-byte \u003c, each
// U+2028 and U+2029 (3 bytes) a 6-byte \u2028. Compaction only removes
// bytes, so the bound holds for a value with space in it.
func RelayedLen(v []byte) int {
	html := bytes.Count(v, []byte("<")) + bytes.Count(v, []byte(">")) + bytes.Count(v, []byte("&"))
	separators := bytes.Count(v, []byte("\u2028")) + bytes.Count(v, []byte("\u2029"))
	return len(v) + 5*html + 3*separators
}
