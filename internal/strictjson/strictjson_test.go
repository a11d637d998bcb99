package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// oracleCheck is Check's reference: encoding/json's token stream, with
// duplicate names and depth tracked on the side. Slow, but its syntax
// verdicts are encoding/json's own.
func oracleCheck(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("UTF-8")
	}
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
			if len(stack) >= MaxDepth {
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

func TestCheck(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`[`, n) + strings.Repeat(`]`, n) }
	tests := []struct {
		in   string
		kind Kind // 0: valid
		msg  string
	}{
		{`{}`, 0, ""}, {` {"a" : [1, -2.5e+3, "x\u00e9\n", true, false, null, {}]} `, 0, ""},
		{`"\ud800"`, 0, ""}, // half a surrogate pair: encoding/json takes it as U+FFFD
		{`{"a":1,"\u0061":2}`, Duplicate, `duplicate key "a"`},
		{`{"a":{"b":1},"c":{"b":1}}`, 0, ""},
		{`{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"k1":2}`, Duplicate, `duplicate key "k1"`},
		{`{"a":01}`, Syntax, ""}, {`{"a":1.}`, Syntax, ""}, {`{"a":.5}`, Syntax, ""}, {`{"a":-}`, Syntax, ""},
		{`{"a":tru}`, Syntax, ""}, {`{"a":"\x"}`, Syntax, ""}, {`{"a":"\u12"}`, Syntax, ""}, {"{\"a\":\"\t\"}", Syntax, ""},
		{`{"a":1,}`, Syntax, "invalid character '}' looking for beginning of object key string"},
		{`{,}`, Syntax, ""}, {`{"a"}`, Syntax, ""}, {`{"a":[1,]}`, Syntax, ""}, {`{"a":[1 2]}`, Syntax, ""},
		{`{"a":1}}`, Trailing, ""}, {`{"a":1} {}`, Trailing, ""}, {`{"a":"x`, Truncated, "unexpected EOF"}, {`{`, Truncated, ""},
		{"", Empty, ""}, {" \t", Empty, ""}, {"\"\xff\"", InvalidUTF8, "not valid UTF-8"},
		{deep(MaxDepth), 0, ""},
		{`{"a":` + deep(MaxDepth-1) + `}`, 0, ""},
		{`{"a":` + deep(MaxDepth) + `}`, TooDeep, "nested deeper than 32 levels"},
		{`["]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["]`, 0, ""},
	}
	for _, tt := range tests {
		err := Check([]byte(tt.in))
		var e *Error
		switch {
		case tt.kind == 0 && err != nil:
			t.Errorf("Check(%q) = %v, want nil", tt.in, err)
		case tt.kind != 0 && (!errors.As(err, &e) || e.Kind != tt.kind):
			t.Errorf("Check(%q) = %#v, want kind %d", tt.in, err, tt.kind)
		case tt.msg != "" && err.Error() != tt.msg:
			t.Errorf("Check(%q) = %q, want %q", tt.in, err, tt.msg)
		}
		if want := oracleCheck([]byte(tt.in)); (want == nil) != (err == nil) {
			t.Errorf("Check(%q) = %v, oracle %v", tt.in, err, want)
		}
	}
}

func TestObject(t *testing.T) {
	m, err := Object([]byte(` { "a" : [1, {"b": 2}] , "\u0063" :"x", "d":{} } `), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{[]byte("a"), []byte(`[1, {"b": 2}]`)}, {[]byte("c"), []byte(`"x"`)}, {[]byte("d"), []byte(`{}`)}}
	if len(m) != len(want) {
		t.Fatalf("Object = %q, want %q", m, want)
	}
	for i := range m {
		if !bytes.Equal(m[i].Name, want[i].Name) || !bytes.Equal(m[i].Value, want[i].Value) {
			t.Fatalf("member %d = %q, want %q", i, m[i], want[i])
		}
	}
	for _, in := range []string{`[]`, `"x"`, `1`} {
		var e *Error
		if _, err := Object([]byte(in), nil); !errors.As(err, &e) || e.Kind != NotObject {
			t.Errorf("Object(%s) = %v, want NotObject", in, err)
		}
	}
}

// FuzzCheck: Check accepts exactly what the oracle accepts, and Object
// finds the members encoding/json finds.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"\u0061":2}`, `[1,{"b":[true,null,"\ud800"]},-0.5E-7]`, `{"a":{"b":[]},"c":"d"}`, `{"a":1} x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := Check(data)
		want := oracleCheck(data)
		if (got == nil) != (want == nil) {
			t.Fatalf("%q: Check %v, oracle %v", data, got, want)
		}
		if got != nil || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			return
		}
		m, err := Object(data, nil)
		if err != nil {
			t.Fatalf("%q: Object: %v", data, err)
		}
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(data, &ref); err != nil || len(ref) != len(m) {
			t.Fatalf("%q: %d members, encoding/json %d (%v)", data, len(m), len(ref), err)
		}
		for _, mm := range m {
			if !bytes.Equal(mm.Value, bytes.TrimSpace(ref[string(mm.Name)])) {
				t.Fatalf("%q: member %q = %q, encoding/json %q", data, mm.Name, mm.Value, ref[string(mm.Name)])
			}
		}
	})
}

func TestNestsTooDeep(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		v    string
		want bool
	}{
		{nest(MaxDepth), false},
		{nest(MaxDepth + 1), true},
		{`{"a":` + nest(MaxDepth-1) + `}`, false},
		{`{"a":` + nest(MaxDepth) + `}`, true},
		{`"` + strings.Repeat("[", 100) + `"`, false},     // in a string
		{"[" + strings.Repeat("[],", 100) + "[]]", false}, // many, not deep
		{`["\"` + strings.Repeat("[", 100) + `"]`, false}, // after an escaped quote
	}
	for _, tt := range tests {
		if got := NestsTooDeep([]byte(tt.v)); got != tt.want {
			t.Errorf("NestsTooDeep(%.60s…) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
