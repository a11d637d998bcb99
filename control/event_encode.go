package control

import "github.com/go-json-experiment/json/jsontext"

// AppendToolEvent appends the line of a tool.acknowledged or tool.finished
// event (topic) to b: the bytes EncodeEvent(topic, ev) returns. Every call
// sends two of them, so the usual event (plain ASCII strings, data that is
// already compact JSON) is written by appends rather than through
// json.Marshal's reflection; any other goes through EncodeEvent, which
// also gives the error. FuzzAppendToolEvent holds the two together;
// BenchmarkToolEvent measures what the appends earn.
func AppendToolEvent(b []byte, topic string, ev ToolEvent) ([]byte, error) {
	if !plain(topic) || !plain(ev.App) || !plain(ev.CallID) || !plain(ev.Outcome) ||
		(len(ev.Data) > 0 && !verbatim(ev.Data)) ||
		(ev.Error != nil && (!plain(ev.Error.Code) || !plain(ev.Error.Message) || len(ev.Error.Data) > 0)) {
		line, err := EncodeEvent(topic, ev)
		if err != nil {
			return b, err
		}
		return append(b, line...), nil
	}
	b = append(b, `{"event":"`...)
	b = append(b, topic...)
	b = append(b, `","app":"`...)
	b = append(b, ev.App...)
	b = append(b, `","call_id":"`...)
	b = append(b, ev.CallID...)
	b = append(b, '"')
	if ev.Outcome != "" {
		b = append(b, `,"outcome":"`...)
		b = append(b, ev.Outcome...)
		b = append(b, '"')
	}
	if len(ev.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, ev.Data...)
	}
	if ev.Error != nil {
		b = append(b, `,"error":{"code":"`...)
		b = append(b, ev.Error.Code...)
		b = append(b, `","message":"`...)
		b = append(b, ev.Error.Message...)
		b = append(b, `"}`...)
	}
	return append(b, '}'), nil
}

// plain reports whether json.Marshal writes s as its bytes between
// quotes: printable ASCII but for '"' and '\\' (JSON's escapes) and '&',
// '<' and '>' (escaped for HTML).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c >= 0x80, c == '"', c == '\\', c == '&', c == '<', c == '>':
			return false
		}
	}
	return true
}

// verbatim reports whether json.Marshal writes the raw value v as its
// bytes: one valid value with no space to compact away and nothing it
// escapes in a raw value (<, >, & and U+2028 and U+2029, whose encodings
// start with 0xE2).
func verbatim(v []byte) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return jsontext.Value(v).IsValid()
}
