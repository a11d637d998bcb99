package peer

import (
	"encoding/json"
	"testing"
)

// FuzzPlainJSON holds the encoder's shortcut for plain strings to
// json.Marshal: a string it writes as its bytes is one json.Marshal
// writes the same way.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{"", "notes.search", "a b", `a"b`, `a\b`, "<x>", "a&b", "é", "\x7f", "\n", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !plainJSON(s) {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != `"`+s+`"` {
			t.Fatalf("plainJSON(%q) but json.Marshal writes %s", s, b)
		}
	})
}
