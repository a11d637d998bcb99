package control

import (
	"bytes"
	"encoding/json"

	jsonv2 "github.com/go-json-experiment/json"

	"octosup/internal/strictjson"
)

// The reading of request lines and tool.call's args, on strictjson: a
// line is read once, strictly (no duplicate key at any depth, UTF-8, at
// most strictjson.MaxDepth levels, nothing after it), and what it holds
// decoded from its members. Whatever is refused here goes on to
// decodeRequestSlow or DecodeArgs, which word the refusal (and still
// find the id to answer with).

// strictRequest decodes a line that strictjson takes and whose members
// are a good request; ok is false for any other.
func strictRequest(line []byte) (req Request, ok bool, strictErr error) {
	var few [4]strictjson.Member
	members, err := strictjson.Object(line, few[:0])
	if err != nil {
		return req, false, err
	}
	var haveID, haveOp bool
	for _, m := range members {
		v := m.Value
		switch string(m.Name) {
		case "id":
			req.ID, haveID = parseID(v)
		case "op":
			haveOp = v[0] == '"' && json.Unmarshal(v, &req.Op) == nil && req.Op != ""
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
	return req, haveID && haveOp, nil
}

// toolCallOptions decode tool.call's args as DecodeArgs does, exact
// names and no unknown member, with jsontext's strictness.
var toolCallOptions = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(false))

// strictToolCallArgs decodes tool.call's args; ok is false when they are
// not good ones.
func strictToolCallArgs(args []byte) (a ToolCallArgs, ok bool) {
	if len(bytes.TrimSpace(args)) == 0 || jsonv2.Unmarshal(args, &a, toolCallOptions) != nil {
		return ToolCallArgs{}, false
	}
	// The call's own args are an object or an array, as DecodeArgs keeps
	// them; null and the other kinds are its to word.
	if a.Call.Args != nil && a.Call.Args[0] != '{' && a.Call.Args[0] != '[' {
		return ToolCallArgs{}, false
	}
	return a, true
}
