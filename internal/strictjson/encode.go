package strictjson

// The writing half. octosup's wire bytes are encoding/json's (the golden
// files pin them): these say when encoding/json writes a string or a raw
// value as its bytes, so that a hand-written encoder that has earned its
// place (control.AppendToolEvent) may append it as it is.
// FuzzPlainJSON and FuzzVerbatim hold them to encoding/json.

// plainLow and plainHigh hold one bit per ASCII byte json.Marshal writes
// as itself in a string: ' ' to DEL but '"' and '\\' (JSON's escapes) and
// '&', '<' and '>' (escaped for HTML). A bit test instead of seven
// comparisons.
const (
	plainLow  = 0xafffffbb00000000 // bytes 0 to 63
	plainHigh = 0xffffffffefffffff // bytes 64 to 127
)

// Plain reports whether json.Marshal writes s as its bytes between quotes.
func Plain[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		m := uint64(plainLow)
		if c >= 64 {
			m = plainHigh
		}
		if c >= 128 || m>>(c&63)&1 == 0 {
			return false
		}
	}
	return true
}

// Verbatim reports whether json.Marshal writes the raw value v as its
// bytes: one strictly valid value (Check), with no space to compact away
// and nothing it escapes in a raw value (<, >, & and U+2028 and U+2029,
// whose encodings start with 0xE2).
func Verbatim(v []byte) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return Check(v) == nil
}

// KindOf names the kind of the JSON value v (checked text, not empty) for
// a refusal: "an array", "a string", "a boolean", "null" or "a number";
// an object is the caller's to expect.
func KindOf(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
