package frame

import (
	"encoding/json"
	"strings"
	"testing"
)

// RelayedLen is what json.Marshal writes for a compact value, and no less
// for one with space in it.
func TestRelayedLen(t *testing.T) {
	for _, v := range []string{
		`{}`, `{"a":"b"}`, `"<script>&"`, `["\u2028",">"]`, "\"\u2028\u2029<\"",
		`{"t":"` + strings.Repeat("<", 1000) + `"}`, `{ "a" : [ 1 , "<" ] }`,
	} {
		b, err := json.Marshal(json.RawMessage(v))
		if err != nil {
			t.Fatal(err)
		}
		got := RelayedLen([]byte(v))
		if got < len(b) || (!strings.ContainsAny(v, " ") && got != len(b)) {
			t.Errorf("RelayedLen(%s) = %d, json.Marshal writes %d bytes", v, got, len(b))
		}
	}
}

func FuzzRelayedLen(f *testing.F) {
	f.Add([]byte(`{"a":"<&>\u2028"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		b, err := json.Marshal(json.RawMessage(v))
		if err != nil {
			return // not JSON
		}
		if got := RelayedLen(v); got < len(b) {
			t.Fatalf("RelayedLen(%q) = %d, json.Marshal writes %d bytes", v, got, len(b))
		}
	})
}
