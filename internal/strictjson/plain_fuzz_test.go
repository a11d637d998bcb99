package strictjson

import (
	"encoding/json"
	"testing"
)

// FuzzPlainJSON holds Plain to json.Marshal: a string it calls plain is
// one json.Marshal writes as its bytes.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{"", "notes.search", "a b", `a"b`, `a\b`, "<x>", "a&b", "é", "\x7f", "\n", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Plain(s) {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != `"`+s+`"` {
			t.Fatalf("Plain(%q) but json.Marshal writes %s", s, b)
		}
	})
}

// Plain's bits are json.Marshal's: every byte alone is plain exactly when
// json.Marshal writes it as itself.
func TestPlainIsJSONMarshal(t *testing.T) {
	for c := range 256 {
		s := string([]byte{byte(c)})
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(data) == `"`+s+`"`; Plain(s) != want {
			t.Errorf("Plain(%q) = %v, json.Marshal writes %s", s, !want, data)
		}
	}
}
