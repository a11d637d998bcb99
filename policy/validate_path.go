package policy

import (
	"regexp"
	"strconv"
	"strings"
)

// seg is one step of a JSON path: an object key, or an array index when
// index >= 0. Keeping the two apart matters: env may have a key "0".
type seg struct {
	key   string
	index int
}

// jsonPath locates a value in the manifest. It is never appended to in
// place: child and at copy, so that paths handed out stay as they were.
type jsonPath []seg

func (p jsonPath) child(key string) jsonPath {
	return append(p[:len(p):len(p)], seg{key: key, index: -1})
}

func (p jsonPath) at(i int) jsonPath {
	return append(p[:len(p):len(p)], seg{index: i})
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// String writes the path the way people read JSON: apps[0].sandbox.network,
// with odd keys quoted (env["MY.VAR"]).
func (p jsonPath) String() string {
	var b strings.Builder
	for _, s := range p {
		switch {
		case s.index >= 0:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case plainKey.MatchString(s.key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		default:
			b.WriteString("[" + strconv.Quote(s.key) + "]")
		}
	}
	return b.String()
}

// locate turns the string tokens of a JSON pointer into a path, using the
// document to tell indexes from keys.
func locate(doc any, tokens []string) jsonPath {
	p := make(jsonPath, 0, len(tokens))
	cur := doc
	for _, tok := range tokens {
		switch v := cur.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err == nil && i >= 0 && i < len(v) {
				p = p.at(i)
				cur = v[i]
				continue
			}
			cur = nil
		case map[string]any:
			cur = v[tok]
		default:
			cur = nil
		}
		p = p.child(tok)
	}
	return p
}

// valueAt is the document's value at p, or nil.
func valueAt(doc any, p jsonPath) any {
	cur := doc
	for _, s := range p {
		switch v := cur.(type) {
		case []any:
			if s.index < 0 || s.index >= len(v) {
				return nil
			}
			cur = v[s.index]
		case map[string]any:
			if s.index >= 0 {
				return nil
			}
			cur = v[s.key]
		default:
			return nil
		}
	}
	return cur
}
