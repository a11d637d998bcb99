package control

import "github.com/go-json-experiment/json/jsontext"

// AppendToolEvent appends to b the line of a tool.acknowledged or
// tool.finished event: the bytes of EncodeEvent(topic, ev). Each tool
// call sends two, so the usual event (plain ASCII, compact data) is
// appended directly; any other goes through EncodeEvent. FuzzAppendToolEvent
// holds the two together; BenchmarkToolEvent measures the gain.
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
	b = append(append(b, `{"event":"`...), topic...)
	b = append(append(b, `","app":"`...), ev.App...)
	b = append(append(b, `","call_id":"`...), ev.CallID...)
	b = append(b, '"')
	if ev.Outcome != "" {
		b = append(append(append(b, `,"outcome":"`...), ev.Outcome...), '"')
	}
	if len(ev.Data) > 0 {
		b = append(append(b, `,"data":`...), ev.Data...)
	}
	if ev.Error != nil {
		b = append(append(b, `,"error":{"code":"`...), ev.Error.Code...)
		b = append(append(append(b, `","message":"`...), ev.Error.Message...), `"}`...)
	}
	return append(b, '}'), nil
}

// plain reports whether json.Marshal writes s as is between quotes:
// printable ASCII but for '"' and '\\' (JSON's escapes) and '&', '<' and
// '>' (HTML's).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c >= 0x80, c == '"', c == '\\', c == '&', c == '<', c == '>':
			return false
		}
	}
	return true
}

// verbatim reports whether json.Marshal writes the raw value v as is:
// one valid value, no space to compact away, nothing it escapes (<, >, &,
// U+2028 and U+2029, whose encodings start with 0xE2).
func verbatim(v []byte) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return jsontext.Value(v).IsValid()
}
