package peer

import (
	"bytes"
	"unicode/utf8"
)

// fastToolResult decodes the usual tool_result line in one pass, without
// maps or copies of its keys: {"octos_peer": {...}} whose envelope has
// plain keys, each once, "type": "tool_result", a plain "call_id", and
// either "ok": true with an optional "data" or "awaiting_confirmation":
// true. ok is false for any other line, which ParseLine then decodes the
// strict way (which also words the refusal). It is sound, not complete:
// whatever it accepts, the strict decoder accepts as the same frame
// (FuzzFastToolResult holds it to that).
func fastToolResult(line []byte) (r *ToolResult, ok bool) {
	const prefix = `"` + Envelope + `"`
	s := &scanner{data: line}
	i := s.ws(0)
	if i >= len(line) || line[i] != '{' {
		return nil, false
	}
	i = s.ws(i + 1)
	if !bytes.HasPrefix(line[i:], []byte(prefix)) {
		return nil, false
	}
	i = s.ws(i + len(prefix))
	if i >= len(line) || line[i] != ':' {
		return nil, false
	}
	i = s.ws(i + 1)
	if i >= len(line) || line[i] != '{' {
		return nil, false
	}
	// Only now is the whole line checked: most lines that get here are
	// tool results.
	if !utf8.Valid(line) {
		return nil, false
	}
	i = s.ws(i + 1)
	var (
		typed, okTrue, awaiting bool
		callID                  string
		data                    []byte
		seen                    uint8
	)
	for {
		if i >= len(line) || line[i] != '"' {
			return nil, false
		}
		kend, escaped, err := s.str(i)
		if err != nil || escaped {
			return nil, false
		}
		key := line[i+1 : kend-1]
		i = s.ws(kend)
		if i >= len(line) || line[i] != ':' {
			return nil, false
		}
		i = s.ws(i + 1)
		var bit uint8
		switch string(key) {
		case "type":
			bit = 1
			end, esc, err := s.str(i)
			if i >= len(line) || line[i] != '"' || err != nil || esc || string(line[i+1:end-1]) != TypeToolResult {
				return nil, false
			}
			typed, i = true, end
		case "call_id":
			bit = 2
			if i >= len(line) || line[i] != '"' {
				return nil, false
			}
			end, esc, err := s.str(i)
			if err != nil || esc || !ValidID(string(line[i+1:end-1])) {
				return nil, false
			}
			callID, i = string(line[i+1:end-1]), end
		case "ok":
			bit = 4
			end, err := s.literal(i, "true")
			if err != nil {
				return nil, false // ok false, or not a bool: the strict way
			}
			okTrue, i = true, end
		case "data":
			bit = 8
			s.depth = 2 // inside the line's object and its envelope
			end, err := s.value(i)
			if err != nil {
				return nil, false
			}
			data, i = line[i:end], end
		case "awaiting_confirmation":
			bit = 16
			end, err := s.literal(i, "true")
			if err != nil {
				return nil, false
			}
			awaiting, i = true, end
		default:
			return nil, false
		}
		if seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		i = s.ws(i)
		if i < len(line) && line[i] == ',' {
			i = s.ws(i + 1)
			continue
		}
		if i >= len(line) || line[i] != '}' {
			return nil, false
		}
		break
	}
	// The envelope is the line's only member, and nothing follows.
	i = s.ws(i + 1)
	if i >= len(line) || line[i] != '}' || s.ws(i+1) != len(line) {
		return nil, false
	}
	switch {
	case !typed || callID == "":
		return nil, false
	case awaiting && !okTrue && data == nil:
		return &ToolResult{CallID: callID, AwaitingConfirmation: true}, true
	case okTrue && !awaiting:
		// data aliases the reader's buffer: the frame gets its own copy.
		return &ToolResult{CallID: callID, OK: true, Data: bytes.Clone(data)}, true
	}
	return nil, false
}
