package frame

import "bytes"

// RelayedLen bounds the bytes encoding/json writes for the raw value v,
// as the daemon relays it: each <, > and & becomes a 6-byte \u003c, each
// U+2028 and U+2029 (3 bytes) a 6-byte \u2028. Compaction only removes
// bytes, so the bound holds for a value with space in it.
func RelayedLen(v []byte) int {
	html := bytes.Count(v, []byte("<")) + bytes.Count(v, []byte(">")) + bytes.Count(v, []byte("&"))
	separators := bytes.Count(v, []byte("\u2028")) + bytes.Count(v, []byte("\u2029"))
	return len(v) + 5*html + 3*separators
}
