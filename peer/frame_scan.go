package peer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// A small JSON scanner for the hub's hot path. encoding/json can validate
// but cannot report duplicate keys, and its token API costs more than the
// rest of a request's handling; this scanner checks syntax (RFC 8259, as
// strictly as encoding/json), duplicate keys at every depth and the nesting
// bound in one pass, and finds an object's members without copying them.
// FuzzScanMatchesEncodingJSON holds it to encoding/json's verdicts.
//
// Input must already be valid UTF-8 (topMembers checks that first).

type scanner struct {
	data  []byte
	depth int
}

var errSecondValue = errors.New("a second JSON value follows the object on the same line")

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) ws(i int) int {
	for i < len(s.data) && isSpace(s.data[i]) {
		i++
	}
	return i
}

func (s *scanner) syntax(i int, what string) error {
	if i >= len(s.data) {
		return fmt.Errorf("malformed JSON: the line ends inside a value (%s)", what)
	}
	return fmt.Errorf("malformed JSON: %s at byte %d", what, i)
}

// value scans one value starting at data[i] (no leading space) and returns
// the index after it.
func (s *scanner) value(i int) (int, error) {
	if i >= len(s.data) {
		return i, s.syntax(i, "want a value")
	}
	switch c := s.data[i]; {
	case c == '{':
		return s.object(i, nil)
	case c == '[':
		return s.array(i)
	case c == '"':
		end, _, err := s.str(i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	}
	return i, s.syntax(i, "want a value")
}

func (s *scanner) literal(i int, lit string) (int, error) {
	if len(s.data)-i < len(lit) || string(s.data[i:i+len(lit)]) != lit {
		return i, s.syntax(i, "invalid literal")
	}
	return i + len(lit), nil
}

func (s *scanner) number(i int) (int, error) {
	d := s.data
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return i, s.syntax(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return i, s.syntax(i, "invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return i, s.syntax(i, "invalid number")
		}
	}
	return i, nil
}

// str scans a string starting at its opening quote; escaped reports
// whether it holds a backslash escape (its raw bytes then differ from its
// value).
func (s *scanner) str(i int) (end int, escaped bool, err error) {
	d := s.data
	for i++; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			return i + 1, escaped, nil
		case c < 0x20:
			return i, escaped, s.syntax(i, "control character in a string")
		case c == '\\':
			escaped = true
			i++
			if i >= len(d) {
				return i, escaped, s.syntax(i, "unfinished escape")
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i < 5 {
					return i, escaped, s.syntax(i, "short \\u escape")
				}
				for _, h := range d[i+1 : i+5] {
					if !isHex(h) {
						return i, escaped, s.syntax(i, "bad \\u escape")
					}
				}
				i += 4
			default:
				return i, escaped, s.syntax(i, "bad escape")
			}
		}
	}
	return i, escaped, s.syntax(i, "unterminated string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// keyOf returns a scanned string's value (the key two spellings of which
// are duplicates: "a" and "\u0061" are the same key). An unescaped key is
// its bytes in the line, not a copy: most keys are only compared.
func (s *scanner) keyOf(start, end int, escaped bool) []byte {
	if !escaped {
		return s.data[start+1 : end-1]
	}
	var k string
	json.Unmarshal(s.data[start:end], &k) // scanned: cannot fail
	return []byte(k)
}

func (s *scanner) enter(i int) error {
	s.depth++
	if s.depth > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	return nil
}

// object scans an object at data[i]. With members non-nil it also records
// each member's value (raw, unsplit).
func (s *scanner) object(i int, members map[string]json.RawMessage) (int, error) {
	if err := s.enter(i); err != nil {
		return i, err
	}
	defer func() { s.depth-- }()
	d := s.data
	i = s.ws(i + 1)
	if i < len(d) && d[i] == '}' {
		return i + 1, nil
	}
	var few [8][]byte // most objects are small: no map for them
	keys := few[:0]
	var seen map[string]struct{}
	for {
		if i >= len(d) || d[i] != '"' {
			return i, s.syntax(i, "want a key")
		}
		kend, escaped, err := s.str(i)
		if err != nil {
			return kend, err
		}
		k := s.keyOf(i, kend, escaped)
		if seen == nil && len(keys) == len(few) {
			seen = make(map[string]struct{}, 2*len(few))
			for _, k := range keys {
				seen[string(k)] = struct{}{}
			}
		}
		dup := false
		if seen != nil {
			if _, dup = seen[string(k)]; !dup {
				seen[string(k)] = struct{}{}
			}
		} else {
			for _, o := range keys {
				if string(o) == string(k) {
					dup = true
					break
				}
			}
			keys = append(keys, k)
		}
		if dup {
			return i, fmt.Errorf("duplicate key %q", k)
		}
		i = s.ws(kend)
		if i >= len(d) || d[i] != ':' {
			return i, s.syntax(i, "want ':'")
		}
		i = s.ws(i + 1)
		vstart := i
		if i, err = s.value(i); err != nil {
			return i, err
		}
		if members != nil {
			members[string(k)] = json.RawMessage(d[vstart:i:i])
		}
		i = s.ws(i)
		if i < len(d) && d[i] == ',' {
			i = s.ws(i + 1)
			continue
		}
		if i < len(d) && d[i] == '}' {
			return i + 1, nil
		}
		return i, s.syntax(i, "want ',' or '}'")
	}
}

func (s *scanner) array(i int) (int, error) {
	if err := s.enter(i); err != nil {
		return i, err
	}
	defer func() { s.depth-- }()
	d := s.data
	i = s.ws(i + 1)
	if i < len(d) && d[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = s.value(i); err != nil {
			return i, err
		}
		i = s.ws(i)
		if i < len(d) && d[i] == ',' {
			i = s.ws(i + 1)
			continue
		}
		if i < len(d) && d[i] == ']' {
			return i + 1, nil
		}
		return i, s.syntax(i, "want ',' or ']'")
	}
}

// scanTop checks that data is exactly one JSON value (an object when
// wantObject) with surrounding space, and returns the members of that
// object when members is non-nil.
func scanTop(data []byte, wantObject bool, members map[string]json.RawMessage) error {
	s := &scanner{data: data}
	i := s.ws(0)
	if i == len(data) {
		return errors.New("empty line: want one JSON value")
	}
	var err error
	if data[i] == '{' {
		i, err = s.object(i, members)
	} else if wantObject {
		return errors.New("not a JSON object")
	} else {
		i, err = s.value(i)
	}
	if err != nil {
		return err
	}
	if i = s.ws(i); i == len(data) {
		return nil
	}
	if _, err := s.value(i); err == nil {
		return errSecondValue
	}
	return s.syntax(i, "text after the value")
}
