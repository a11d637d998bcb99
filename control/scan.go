package control

import (
	"encoding/json"

	"octosup/internal/strictjson"
)

// The reading of request lines and tool.call's args, on strictjson: a
// line is read once, strictly (no duplicate key at any depth, UTF-8, at
// most strictjson.MaxDepth levels, nothing after it), and what it holds
// decoded from its members. Whatever is refused here goes on to
// decodeRequestSlow or DecodeArgs, which word the refusal (and still
// find the id to answer with).

// strictRequest decodes a line that strictjson takes and whose members
// are a good request; ok is false for any other. tool.call's args are
// read in the same pass (the members of args and of args.call), and
// decoded into req when they are the usual ones.
func strictRequest(line []byte) (req Request, ok bool, strictErr error) {
	// Arrays for the usual members: no allocation for them. Any op's
	// args are read into args (request.reply's are four).
	var few [4]strictjson.Member
	var args [6]strictjson.Member
	var call [8]strictjson.Member
	members, am, cm, err := strictjson.ObjectIn2(line, "args", "call", few[:0], args[:0], call[:0])
	if err != nil {
		return req, false, err
	}
	var haveID, haveOp bool
	for _, m := range members {
		v := m.Value
		switch string(m.Name) {
		case "id":
			req.ID, haveID = requestID(v)
		case "op":
			req.Op, haveOp = known(v, OpToolCall, OpToolCancel, OpRequestReply, OpRequestEvent)
			haveOp = haveOp && req.Op != ""
		case "args":
			switch v[0] {
			case '{':
				req.Args = v
			case 'n': // null: no args
			default:
				return req, false, nil
			}
		default:
			return req, false, nil
		}
	}
	if req.Op == OpToolCall && req.Args != nil {
		req.toolCall, req.haveToolCall = toolCallArgs(am, cm)
	}
	return req, haveID && haveOp, nil
}

// requestID is parseID for a value strictjson has read, the usual one
// without a copy.
func requestID(v []byte) (int64, bool) {
	if n, end, ok := strictjson.Int(v, 0); ok && end == len(v) {
		return n, n > 0
	}
	return parseID(v)
}

// stringValue is the string v, a value strictjson has read; ok is false
// when it is not a string.
func stringValue(v []byte) (string, bool) {
	if s, end, ok := strictjson.PlainString(v, 0); ok && end == len(v) {
		return string(s), true
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// strictToolCallArgs decodes tool.call's args, read strictly in one pass,
// as DecodeArgs does (exact names, no unknown member); ok is false when
// they are not good ones, or not the usual ones (DecodeArgs then decides).
func strictToolCallArgs(args []byte) (a ToolCallArgs, ok bool) {
	var top [2]strictjson.Member
	var call [8]strictjson.Member
	tm, cm, err := strictjson.ObjectIn(args, "call", top[:0], call[:0])
	if err != nil {
		return ToolCallArgs{}, false
	}
	return toolCallArgs(tm, cm)
}

// toolCallArgs decodes tool.call's args from their members (tm) and those
// of their call (cm).
func toolCallArgs(tm, cm []strictjson.Member) (a ToolCallArgs, ok bool) {
	for _, m := range tm {
		switch string(m.Name) {
		case "app":
			a.App, ok = stringValue(m.Value)
		case "call":
			ok = m.Value[0] == '{' // its members are cm
		default:
			ok = false
		}
		if !ok {
			return ToolCallArgs{}, false
		}
	}
	if !toolCall(&a.Call, cm) {
		return ToolCallArgs{}, false
	}
	return a, true
}

// toolCall decodes the members of tool.call's call.
func toolCall(c *ToolCall, members []strictjson.Member) bool {
	for _, m := range members {
		v, ok := m.Value, false
		switch string(m.Name) {
		case "call_id":
			c.CallID, ok = stringValue(v)
		case "name":
			c.Name, ok = stringValue(v)
		case "args":
			// An object or an array, as DecodeArgs keeps them; null and
			// the other kinds are its to word.
			if ok = v[0] == '{' || v[0] == '['; ok {
				c.Args = v
			}
		case "risk":
			c.Risk, ok = known(v, RiskRead, RiskWrite, RiskDestructive)
		case "confirm":
			c.Confirm, ok = known(v, ConfirmNone, ConfirmHost, ConfirmApp)
		case "timeout_ms":
			var end int
			c.TimeoutMS, end, ok = strictjson.Int(v, 0)
			ok = ok && end == len(v)
		case "context_id":
			c.ContextID, ok = stringValue(v)
		case "caller":
			c.Caller, ok = stringValue(v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// known is stringValue that spares the usual words a copy each: the
// risk and confirm words, and the ops a kernel sends for every call and
// request.
func known(v []byte, words ...string) (string, bool) {
	if len(v) > 2 && v[0] == '"' && v[len(v)-1] == '"' {
		for _, w := range words {
			if string(v[1:len(v)-1]) == w {
				return w, true
			}
		}
	}
	return stringValue(v)
}
