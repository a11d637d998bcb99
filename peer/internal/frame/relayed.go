package frame

import "bytes"

// RelayedLen bounds the bytes encoding/json writes for the raw JSON value
// v (a json.RawMessage), which is how the daemon writes what it relays:
// each <, > and & becomes a 6-byte \u003c, and U+2028 and U+2029 (3 bytes
// each) a 6-byte \u2028. Compaction only takes bytes away, so a value
// with space in it gets a bound above what it is written as.
func RelayedLen(v []byte) int {
	html := bytes.Count(v, []byte("<")) + bytes.Count(v, []byte(">")) + bytes.Count(v, []byte("&"))
	separators := bytes.Count(v, []byte("\u2028")) + bytes.Count(v, []byte("\u2029"))
	return len(v) + 5*html + 3*separators
}
