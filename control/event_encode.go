package control

import "encoding/json"

// AppendToolEvent appends the line of a tool.acknowledged or tool.finished
// event (topic) to b: the bytes EncodeEvent(topic, ev) returns. Every call
// sends two of them, so the usual event (plain ASCII strings, data that is
// already compact JSON) is written by appends rather than through
// json.Marshal's reflection; any other goes through EncodeEvent, which
// also gives the error. FuzzAppendToolEvent holds the two together.
func AppendToolEvent(b []byte, topic string, ev ToolEvent) ([]byte, error) {
	if !plainJSON(topic) || !plainJSON(ev.App) || !plainJSON(ev.CallID) || !plainJSON(ev.Outcome) ||
		(len(ev.Data) > 0 && !verbatimJSON(ev.Data)) ||
		(ev.Error != nil && (!plainJSON(ev.Error.Code) || !plainJSON(ev.Error.Message) || len(ev.Error.Data) > 0)) {
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

// plainJSON reports whether json.Marshal writes s as its bytes between
// quotes: printable ASCII without the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// verbatimJSON reports whether json.Marshal writes the raw value v as its
// bytes: one valid JSON value (as skipValue, sound against encoding/json,
// finds it) with no space to compact away and nothing json.Marshal
// escapes in a raw value (<, >, &, and U+2028/U+2029, whose encodings
// start with 0xE2).
func verbatimJSON(v json.RawMessage) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return skipValue(v, 0, 0) == len(v)
}
