package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"octosup/internal/strictjson"
)

// oracleCheck is the frame reader's reference: encoding/json's token stream,
// with duplicate keys and depth tracked on the side. Slow, but its syntax
// verdicts are encoding/json's own.
func oracleCheck(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type level struct {
		object, wantKey bool
		keys            map[string]bool
	}
	var stack []*level
	done := func() {
		if n := len(stack); n > 0 {
			stack[n-1].wantKey = true
		}
	}
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if first || len(stack) > 0 {
				return errors.New("incomplete")
			}
			return nil
		}
		if err != nil {
			return err
		}
		if !first && len(stack) == 0 {
			return errors.New("second value")
		}
		first = false
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				done()
				continue
			}
			k := tok.(string)
			if stack[n-1].keys[k] {
				return errors.New("duplicate")
			}
			stack[n-1].keys[k] = true
			stack[n-1].wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= strictjson.MaxDepth {
				return errors.New("deep")
			}
			stack = append(stack, &level{object: tok == json.Delim('{'), wantKey: true, keys: map[string]bool{}})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
}

func TestScanner(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{`{}`, true}, {` {"a" : [1, -2.5e+3, "x\u00e9\n", true, false, null, {}]} `, true},
		{`{"a":1,"\u0061":2}`, false}, // the same key, spelled twice
		{`{"a":{"b":1},"c":{"b":1}}`, true},
		{`{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"k1":2}`, false}, // past the small-object path
		{`{"a":01}`, false}, {`{"a":1.}`, false}, {`{"a":.5}`, false}, {`{"a":-}`, false}, {`{"a":1e}`, false},
		{`{"a":tru}`, false}, {`{"a":"\x"}`, false}, {`{"a":"\u12"}`, false}, {"{\"a\":\"\t\"}", false},
		{`{"a":1,}`, false}, {`{,}`, false}, {`{"a"}`, false}, {`{"a":[1,]}`, false}, {`{"a":[1 2]}`, false},
		{`{"a":1}}`, false}, {`{"a":1} {}`, false}, {`{"a":"x`, false}, {`{`, false},
		{strings.Repeat(`[`, strictjson.MaxDepth) + strings.Repeat(`]`, strictjson.MaxDepth), true},
		{`{"a":` + strings.Repeat(`[`, strictjson.MaxDepth-1) + strings.Repeat(`]`, strictjson.MaxDepth-1) + `}`, true},
		{`{"a":` + strings.Repeat(`[`, strictjson.MaxDepth) + strings.Repeat(`]`, strictjson.MaxDepth) + `}`, false},
	}
	for _, tt := range tests {
		got := CheckValue([]byte(tt.in))
		if (got == nil) != tt.ok {
			t.Errorf("checkAny %q: %v, want ok=%v", tt.in, got, tt.ok)
		}
		if want := oracleCheck([]byte(tt.in)); (want == nil) != (got == nil) {
			t.Errorf("checkAny %q: %v, oracle %v", tt.in, got, want)
		}
	}
}

// FuzzScanMatchesEncodingJSON: on valid UTF-8 the frame reader accepts
// exactly what the oracle accepts, and finds the members encoding/json finds.
func FuzzScanMatchesEncodingJSON(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"a":1,"\u0061":2}`))
	f.Add([]byte(`[1,{"b":[true,null,"\ud800"]},-0.5E-7]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return
		}
		got := CheckValue(data)
		want := oracleCheck(data)
		if (got == nil) != (want == nil) {
			t.Fatalf("%q: checkAny %v, oracle %v", data, got, want)
		}
		if got != nil || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			return
		}
		m, err := Members(data)
		if err != nil {
			t.Fatalf("%q: members: %v", data, err)
		}
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(data, &ref); err != nil || len(ref) != len(m) {
			t.Fatalf("%q: %d members, encoding/json %d (%v)", data, len(m), len(ref), err)
		}
		for k, v := range ref {
			if !bytes.Equal(bytes.TrimSpace(m[k]), bytes.TrimSpace(v)) {
				t.Fatalf("%q: member %q = %q, encoding/json %q", data, k, m[k], v)
			}
		}
	})
}
