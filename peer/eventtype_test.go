package peer

import (
	"encoding/json"

	"octosup/peer/internal/frame"
)

func eventType(data json.RawMessage) (typ, reason string) {
	if len(data) == 0 || data[0] != '{' {
		return "", ""
	}
	m, err := frame.Members(data) // exact keys: "Type" is not "type"
	if err != nil {
		return "", ""
	}
	if v := m["type"]; len(v) > 0 && v[0] == '"' {
		json.Unmarshal(v, &typ)
	}
	if v := m["reason"]; len(v) > 0 && v[0] == '"' {
		json.Unmarshal(v, &reason)
	}
	return typ, reason
}

func isTurnEnd(data json.RawMessage) bool {
	t, _ := eventType(data)
	return t == TurnEnd
}
