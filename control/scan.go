package control

// A small JSON syntax checker for the hot path of DecodeRequest. It is
// sound, not complete: whatever it accepts encoding/json accepts as the
// same value, and whatever it is unsure of (deep nesting, ...) it
// refuses, so that the caller falls back to encoding/json, which then
// gives the answer and its error message. FuzzDecodeRequest holds the
// fast path to the encoding/json one.

// fastMaxDepth bounds the nesting the checker follows; deeper values go
// the slow way (encoding/json's own bound is 10000).
const fastMaxDepth = 64

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(d []byte, i int) int {
	for i < len(d) && isSpace(d[i]) {
		i++
	}
	return i
}

// skipValue returns the index after the value at d[i], or -1.
func skipValue(d []byte, i, depth int) int {
	if i >= len(d) {
		return -1
	}
	switch c := d[i]; {
	case c == '{':
		return skipObject(d, i, depth+1)
	case c == '[':
		return skipArray(d, i, depth+1)
	case c == '"':
		end, _ := skipString(d, i)
		return end
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(d, i)
	case c == 't':
		return skipLiteral(d, i, "true")
	case c == 'f':
		return skipLiteral(d, i, "false")
	case c == 'n':
		return skipLiteral(d, i, "null")
	}
	return -1
}

func skipLiteral(d []byte, i int, lit string) int {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

func skipDigits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

func skipNumber(d []byte, i int) int {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = skipDigits(d, i)
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		j := skipDigits(d, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := skipDigits(d, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// skipString returns the index after the string at d[i] (its opening
// quote), or -1; plain says it has neither escapes nor bytes outside
// printable ASCII, so that its bytes are its value.
func skipString(d []byte, i int) (end int, plain bool) {
	plain = true
	for i++; i < len(d); i++ {
		// The usual bytes, in a loop of their own.
		for i < len(d) && d[i] >= 0x20 && d[i] < 0x80 && d[i] != '"' && d[i] != '\\' {
			i++
		}
		if i == len(d) {
			break
		}
		switch c := d[i]; {
		case c == '"':
			return i + 1, plain
		case c < 0x20:
			return -1, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			i++
			if i >= len(d) {
				return -1, false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i < 5 {
					return -1, false
				}
				for _, h := range d[i+1 : i+5] {
					if !isHex(h) {
						return -1, false
					}
				}
				i += 4
			default:
				return -1, false
			}
		}
	}
	return -1, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func skipObject(d []byte, i, depth int) int {
	if depth > fastMaxDepth {
		return -1
	}
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		if i, _ = skipString(d, i); i < 0 {
			return -1
		}
		i = skipSpace(d, i)
		if i >= len(d) || d[i] != ':' {
			return -1
		}
		if i = skipValue(d, skipSpace(d, i+1), depth); i < 0 {
			return -1
		}
		i = skipSpace(d, i)
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

func skipArray(d []byte, i, depth int) int {
	if depth > fastMaxDepth {
		return -1
	}
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == ']' {
		return i + 1
	}
	for {
		if i = skipValue(d, i, depth); i < 0 {
			return -1
		}
		i = skipSpace(d, i)
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

// fastRequest decodes the usual request line, {"id": N, "op": "name",
// "args": {...}} with each member at most once, plain keys and op, and a
// small positive integer id, in one pass. ok is false for anything else
// (including every line that is not a request), which DecodeRequest then
// decodes with encoding/json. Args aliases line.
func fastRequest(line []byte) (req Request, ok bool) {
	d := line
	i := skipSpace(d, 0)
	if i >= len(d) || d[i] != '{' {
		return req, false
	}
	i = skipSpace(d, i+1)
	var haveID, haveOp, haveArgs bool
	for {
		if i >= len(d) || d[i] != '"' {
			return req, false
		}
		kend, plain := skipString(d, i)
		if kend < 0 || !plain {
			return req, false
		}
		key := d[i+1 : kend-1]
		i = skipSpace(d, kend)
		if i >= len(d) || d[i] != ':' {
			return req, false
		}
		i = skipSpace(d, i+1)
		if i >= len(d) {
			return req, false
		}
		switch string(key) {
		case "id":
			if haveID || d[i] < '1' || d[i] > '9' {
				return req, false
			}
			end := skipDigits(d, i)
			if end-i > 18 { // no overflow of int64
				return req, false
			}
			var id int64
			for _, c := range d[i:end] {
				id = id*10 + int64(c-'0')
			}
			req.ID, haveID, i = id, true, end
		case "op":
			if haveOp || d[i] != '"' {
				return req, false
			}
			end, plain := skipString(d, i)
			if end < 0 || !plain || end-i == 2 {
				return req, false
			}
			req.Op, haveOp, i = string(d[i+1:end-1]), true, end
		case "args":
			if haveArgs {
				return req, false
			}
			var end int
			switch d[i] {
			case '{':
				end = skipObject(d, i, 1)
				if end < 0 {
					return req, false
				}
				req.Args = d[i:end:end]
			case 'n':
				if end = skipLiteral(d, i, "null"); end < 0 {
					return req, false
				}
			default:
				return req, false
			}
			haveArgs, i = true, end
		default:
			return req, false
		}
		i = skipSpace(d, i)
		if i >= len(d) {
			return req, false
		}
		if d[i] == ',' {
			i = skipSpace(d, i+1)
			continue
		}
		if d[i] != '}' {
			return req, false
		}
		if !haveID || !haveOp || skipSpace(d, i+1) != len(d) {
			return req, false
		}
		return req, true
	}
}

// members calls fn with each member of the object at d[i] (its plain
// key, its value's bytes, and whether that value is a plain string, see
// skipString) and returns the index after the object. It returns -1 when
// the object is not one fastRequest's kind of decoder takes: a key that
// is not plain, a key twice, or when fn says no. An object member whose
// key inner names (inner may be nil) is read by members with inner's fn in
// the same pass, not skipped first; fn then gets it with its bytes.
func members(d []byte, i int, fn func(key, v []byte, plain bool) bool, inner func(key []byte) func(key, v []byte, plain bool) bool) int {
	if i >= len(d) || d[i] != '{' {
		return -1
	}
	var seen [8][]byte
	n := 0
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		kend, plainKey := skipString(d, i)
		if kend < 0 || !plainKey {
			return -1
		}
		key := d[i+1 : kend-1]
		for _, k := range seen[:n] {
			if string(k) == string(key) {
				return -1
			}
		}
		if n == len(seen) {
			return -1
		}
		seen[n] = key
		n++
		i = skipSpace(d, kend)
		if i >= len(d) || d[i] != ':' {
			return -1
		}
		i = skipSpace(d, i+1)
		var end int
		plain := false
		var sub func(key, v []byte, plain bool) bool
		if i < len(d) && d[i] == '{' && inner != nil {
			sub = inner(key)
		}
		switch {
		case sub != nil:
			end = members(d, i, sub, nil)
		case i < len(d) && d[i] == '"':
			end, plain = skipString(d, i) // the string's one scan
		default:
			end = skipValue(d, i, 1)
		}
		if end < 0 || !fn(key, d[i:end:end], plain) {
			return -1
		}
		i = skipSpace(d, end)
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// plainString is the value of a member's value v when members found it
// a plain string (its bytes between the quotes are its value).
func plainString(v []byte, plain bool) (string, bool) {
	if !plain {
		return "", false
	}
	switch s := v[1 : len(v)-1]; string(s) {
	// The usual risks and confirmations, without a copy each.
	case RiskRead:
		return RiskRead, true
	case RiskWrite:
		return RiskWrite, true
	case RiskDestructive:
		return RiskDestructive, true
	case ConfirmNone:
		return ConfirmNone, true
	case ConfirmHost:
		return ConfirmHost, true
	case ConfirmApp:
		return ConfirmApp, true
	default:
		return string(s), true
	}
}

// plainInt is the value of a JSON integer of at most 18 digits.
func plainInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// fastToolCallArgs decodes the usual tool.call args in one pass; ok is
// false for anything else, which DecodeToolCallArgs then decodes with
// encoding/json. The call's Args alias args.
func fastToolCallArgs(args []byte) (a ToolCallArgs, ok bool) {
	call := func(key, v []byte, plain bool) bool {
		c := &a.Call
		var ok bool
		switch string(key) {
		case "call_id":
			c.CallID, ok = plainString(v, plain)
		case "name":
			c.Name, ok = plainString(v, plain)
		case "args":
			// An object or an array, as encoding/json keeps it; null and
			// the other kinds go the slow way.
			if ok = v[0] == '{' || v[0] == '['; ok {
				c.Args = v
			}
		case "risk":
			c.Risk, ok = plainString(v, plain)
		case "confirm":
			c.Confirm, ok = plainString(v, plain)
		case "timeout_ms":
			c.TimeoutMS, ok = plainInt(v)
		case "context_id":
			c.ContextID, ok = plainString(v, plain)
		case "caller":
			c.Caller, ok = plainString(v, plain)
		}
		return ok
	}
	top := func(key, v []byte, plain bool) bool {
		var ok bool
		switch string(key) {
		case "app":
			a.App, ok = plainString(v, plain)
		case "call":
			ok = v[0] == '{' // read by members already, with call
		}
		return ok
	}
	i := skipSpace(args, 0)
	end := members(args, i, top, func(key []byte) func(key, v []byte, plain bool) bool {
		if string(key) == "call" {
			return call
		}
		return nil
	})
	if end < 0 || skipSpace(args, end) != len(args) {
		return ToolCallArgs{}, false
	}
	return a, true
}
