package control

import "octosup/internal/strictjson"

// AppendToolEvent appends the line of a tool.acknowledged or tool.finished
// event (topic) to b: the bytes EncodeEvent(topic, ev) returns. Every call
// sends two of them, so the usual event (plain ASCII strings, data that is
// already compact JSON) is written by appends rather than through
// json.Marshal's reflection; any other goes through EncodeEvent, which
// also gives the error. FuzzAppendToolEvent holds the two together.
func AppendToolEvent(b []byte, topic string, ev ToolEvent) ([]byte, error) {
	if !strictjson.Plain(topic) || !strictjson.Plain(ev.App) || !strictjson.Plain(ev.CallID) || !strictjson.Plain(ev.Outcome) ||
		(len(ev.Data) > 0 && !strictjson.Verbatim(ev.Data)) ||
		(ev.Error != nil && (!strictjson.Plain(ev.Error.Code) || !strictjson.Plain(ev.Error.Message) || len(ev.Error.Data) > 0)) {
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
