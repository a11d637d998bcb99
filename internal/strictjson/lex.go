package strictjson

import (
	"unicode/utf8"
)

// The usual text read by hand, one byte at a time and once: strings
// without an escape, numbers, literals, and objects and arrays of those
// (objects of at most maxFastMembers members), a few levels deep. jsontext
// checks a name twice in one object by a hash of every name, and every
// value twice when the caller wants an object's members; for the short
// lines the hub and the control socket carry that was most of their
// reading (measured when it was written: git log -p docs/performance.md).
//
// The reader is sound, not complete: what it takes (ok true), jsontext
// takes as the same value with the same end; anything else (an escape, a
// long object, a syntax error, nesting past MaxDepth) it leaves to
// jsontext (ok false), which gives the verdict and the error. FuzzLex
// holds the one to the other. The exported functions are the primitives
// the hot lines' own readers (peer's tool_result, control's request) are
// built on.

// maxFastMembers is the most members of one object the hand reader
// compares names of; a longer object goes to jsontext.
const maxFastMembers = 16

// Space returns the index of the first byte at or after i that is not
// JSON space.
func Space(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// PlainString reads the string at data[i] (its opening quote) when it has
// no escape: its value is then s, its bytes between the quotes (UTF-8,
// checked). ok is false for any other string and for what is not one.
func PlainString(data []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s = data[i+1 : j : j]
			if !ascii && !utf8.Valid(s) {
				return nil, 0, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}

// Int reads the integer at data[i]: an optional minus and at most 18
// digits, no fraction or exponent, which an int64 holds. ok is false for
// any other number and for what is not one.
func Int(data []byte, i int) (n int64, end int, ok bool) {
	neg := i < len(data) && data[i] == '-'
	if neg {
		i++
	}
	j := digits(data, i)
	if j == i || j-i > 18 || (data[i] == '0' && j-i > 1) {
		return 0, 0, false
	}
	if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return 0, 0, false
	}
	for _, c := range data[i:j] {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, j, true
}

// Value reads the value at data[i], inside depth levels of nesting, and
// returns its end. ok is false when the hand reader does not take it: a
// caller then reads its text the general way (Check, Object), which gives
// the verdict.
func Value(data []byte, i, depth int) (end int, ok bool) {
	if i >= len(data) {
		return 0, false
	}
	switch c := data[i]; {
	case c == '{':
		return fastObject(data, i, depth+1)
	case c == '[':
		return fastArray(data, i, depth+1)
	case c == '"':
		_, end, ok = PlainString(data, i)
		return end, ok
	case c == '-' || (c >= '0' && c <= '9'):
		return number(data, i)
	case c == 't':
		return literal(data, i, "true")
	case c == 'f':
		return literal(data, i, "false")
	case c == 'n':
		return literal(data, i, "null")
	}
	return 0, false
}

func literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// number reads JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func number(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
	}
	j := digits(data, i)
	if j == i || (data[i] == '0' && j-i > 1) {
		return 0, false
	}
	i = j
	if i < len(data) && data[i] == '.' {
		if j = digits(data, i+1); j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if j = digits(data, i); j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// fastObject reads the object at data[i], which opens level depth.
func fastObject(data []byte, i, depth int) (int, bool) {
	if depth > MaxDepth {
		return 0, false
	}
	var names [maxFastMembers][]byte
	n := 0
	i = Space(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	for {
		name, end, ok := PlainString(data, i)
		if !ok || n == len(names) || seen(names[:n], name) {
			return 0, false
		}
		names[n] = name
		n++
		if i, ok = after(data, end, ':'); !ok {
			return 0, false
		}
		if i, ok = Value(data, i, depth); !ok {
			return 0, false
		}
		i = Space(data, i)
		if i < len(data) && data[i] == ',' {
			i = Space(data, i+1)
			continue
		}
		if i < len(data) && data[i] == '}' {
			return i + 1, true
		}
		return 0, false
	}
}

// fastArray reads the array at data[i], which opens level depth.
func fastArray(data []byte, i, depth int) (int, bool) {
	if depth > MaxDepth {
		return 0, false
	}
	i = Space(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = Value(data, i, depth); !ok {
			return 0, false
		}
		i = Space(data, i)
		if i < len(data) && data[i] == ',' {
			i = Space(data, i+1)
			continue
		}
		if i < len(data) && data[i] == ']' {
			return i + 1, true
		}
		return 0, false
	}
}

// after returns the index after the byte c that follows data[i] (space
// around it skipped), or ok false when c is not next.
func after(data []byte, i int, c byte) (int, bool) {
	i = Space(data, i)
	if i >= len(data) || data[i] != c {
		return 0, false
	}
	return Space(data, i+1), true
}

func seen(names [][]byte, name []byte) bool {
	for _, n := range names {
		if string(n) == string(name) {
			return true
		}
	}
	return false
}

// fastMembers appends the members of the object at data[i], which opens
// level depth, to members, and those of its member named p[0] (when an
// object) to in[0], and so on down the path, in the same pass.
func fastMembers(data []byte, i, depth int, p path, members []Member, in levels) ([]Member, levels, int, bool) {
	n0 := len(members)
	i = Space(data, i+1)
	if i < len(data) && data[i] == '}' {
		return members, in, i + 1, true
	}
	for {
		name, end, ok := PlainString(data, i)
		if !ok || len(members)-n0 == maxFastMembers || seenMember(members[n0:], name) {
			return members, in, 0, false
		}
		if i, ok = after(data, end, ':'); !ok {
			return members, in, 0, false
		}
		start := i
		if p[0] != "" && i < len(data) && data[i] == '{' && string(name) == p[0] {
			below, lv := p.down(in)
			in[0], lv, i, ok = fastMembers(data, i, depth+1, below, in[0], lv)
			in[1] = lv[0]
		} else {
			i, ok = Value(data, i, depth)
		}
		if !ok {
			return members, in, 0, false
		}
		members = append(members, Member{Name: name, Value: data[start:i:i]})
		i = Space(data, i)
		if i < len(data) && data[i] == ',' {
			i = Space(data, i+1)
			continue
		}
		if i < len(data) && data[i] == '}' {
			return members, in, i + 1, true
		}
		return members, in, 0, false
	}
}

func seenMember(members []Member, name []byte) bool {
	for _, m := range members {
		if string(m.Name) == string(name) {
			return true
		}
	}
	return false
}
