package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The texts of the hub's and the control socket's usual lines, and a few
// more: the hand reader takes each of them (the general way is for the
// unusual).
var usualTexts = []string{
	`{"octos_peer":{"type":"tool_result","call_id":"b12345","ok":true,"data":{}}}`,
	`{"octos_peer":{"type":"request","req_id":"q1.12345","method":"octos.turn.interrupt","args":{"context_id":"c-1","turn_id":"t"}}}`,
	`{"id":1234,"op":"tool.call","args":{"app":"tools","call":{"call_id":"b1","name":"bench.echo","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":"c-1","caller":"bench"}}}`,
	` { "a" : [1, -2.5e+3, "é", true, false, null, {}, [ ]] } `,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`-0`, `0.5E-7`, `"x"`,
}

func TestReadFastTakesTheUsual(t *testing.T) {
	for _, s := range usualTexts {
		data := []byte(s)
		object := data[Space(data, 0)] == '{'
		if _, _, ok := readFast(data, Space(data, 0), object, path{"octos_peer"}, nil, levels{}); !ok {
			t.Errorf("readFast(%s) gave up; want it read by hand", s)
		}
	}
}

// The hand reader gives up on what it must leave to jsontext; read still
// takes what is valid and refuses the rest.
func TestReadFastLeavesTheUnusual(t *testing.T) {
	long := `{`
	for i := range maxFastMembers + 1 {
		long += `"k` + strconv.Itoa(i) + `":1,`
	}
	long = strings.TrimSuffix(long, ",") + `}`
	tests := []struct {
		in    string
		valid bool
	}{
		{`{"a":"\n"}`, true}, {`{"\u0061":1}`, true}, {long, true}, {`"\ud800"`, true},
		{`{"a":1,"a":2}`, false}, {`{"a":01}`, false}, {`{"a":1.}`, false}, {`[1,]`, false}, {`{"a":1}x`, false},
		{`{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, false},
		{"\"\t\"", false}, {`tru`, false}, {`1e`, false}, {`-`, false},
	}
	for _, tt := range tests {
		data := []byte(tt.in)
		if _, _, ok := readFast(data, Space(data, 0), data[0] == '{', path{}, nil, levels{}); ok {
			t.Errorf("readFast(%s) took it; want it left to jsontext", tt.in)
		}
		if err := Check(data); (err == nil) != tt.valid {
			t.Errorf("Check(%s) = %v, want valid %v", tt.in, err, tt.valid)
		}
	}
}

func TestObjectIn(t *testing.T) {
	for _, s := range []string{
		`{"x":1,"env":{"a":"b","c":[1]}}`,
		`{"x":1,"env":{"\u0061":"b","c":[1]}}`, // an escape: read by jsontext
	} {
		top, in, err := ObjectIn([]byte(s), "env", nil, nil)
		if err != nil || len(top) != 2 || len(in) != 2 || string(top[1].Value) != s[13:len(s)-1] ||
			string(in[0].Name) != "a" || string(in[1].Value) != "[1]" {
			t.Errorf("ObjectIn(%s) = %q, %q, %v", s, top, in, err)
		}
	}
	if _, _, err := ObjectIn([]byte(`{"env":{"a":1,"a":2}}`), "env", nil, nil); err == nil {
		t.Error("ObjectIn took a name twice in the inner object")
	}
	// The inner object is a level of its own: 2 levels, and 30 more in
	// it, are the most.
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, esc := range []string{"a", `\u0061`} { // by hand, by jsontext
		for n, want := range map[int]Kind{MaxDepth - 2: 0, MaxDepth - 1: TooDeep} {
			s := `{"env":{"` + esc + `":` + deep(n) + `}}`
			_, _, err := ObjectIn([]byte(s), "env", nil, nil)
			var e *Error
			if (want == 0) != (err == nil) || (want != 0 && (!errors.As(err, &e) || e.Kind != want)) {
				t.Errorf("ObjectIn(%s) = %v, want kind %d", s, err, want)
			}
		}
	}
}

func TestObjectIn2(t *testing.T) {
	for _, s := range []string{
		`{"id":1,"args":{"app":"a","call":{"call_id":"c","args":{"q":1}}}}`,
		`{"id":1,"args":{"app":"a","call":{"call_\u0069d":"c","args":{"q":1}}}}`, // by jsontext
	} {
		top, args, call, err := ObjectIn2([]byte(s), "args", "call", nil, nil, nil)
		if err != nil || len(top) != 2 || len(args) != 2 || len(call) != 2 ||
			string(args[0].Value) != `"a"` || string(call[0].Name) != "call_id" || string(call[1].Value) != `{"q":1}` {
			t.Errorf("ObjectIn2(%s) = %q, %q, %q, %v", s, top, args, call, err)
		}
	}
	for _, s := range []string{
		`{"args":{"call":{"a":1,"a":2}}}`,
		`{"args":{"call":{"a":1,"\u0061":2}}}`,
	} {
		if _, _, _, err := ObjectIn2([]byte(s), "args", "call", nil, nil, nil); err == nil {
			t.Errorf("ObjectIn2(%s) took a name twice on the second level", s)
		}
	}
	// A member on the path that is not an object is only a member; the
	// second name counts only in the first name's object.
	for _, s := range []string{`{"args":{"call":[1]}}`, `{"args":{"x":1},"call":{"a":1}}`} {
		top, args, call, err := ObjectIn2([]byte(s), "args", "call", nil, nil, nil)
		if err != nil || len(top) == 0 || len(args) != 1 || len(call) != 0 {
			t.Errorf("ObjectIn2(%s) = %q, %q, %q, %v", s, top, args, call, err)
		}
	}
}

// FuzzLex holds the hand reader to jsontext's: Check and Object accept
// what jsontext alone accepts, with the same members; whatever Value
// takes, jsontext takes as one value with the same end; the primitives
// read what jsontext reads. Seeded with the golden lines of the hub and
// the control socket.
func FuzzLex(f *testing.F) {
	for _, s := range usualTexts {
		f.Add([]byte(s))
	}
	addGoldenLines(f, "../../peer/internal/frame/testdata/golden/*.json", "../../control/testdata/golden/*.jsonl")
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[1,{"b":[true,null,"\ud800"]},-0.5E-7]`, `{"a":1} x`, `123456789012345678`, `"é\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return
		}
		start := Space(data, 0)
		if start == len(data) {
			return
		}
		sameVerdict(t, data)
		if end, ok := Value(data, start, 0); ok {
			if _, _, err := readGeneral(data[:end], false, path{}, nil, levels{}); err != nil {
				t.Fatalf("Value took %q; jsontext refuses it: %v", data[:end], err)
			}
		}
		checkPrimitives(t, data, start)
		if data[start] != '{' {
			return
		}
		p := pathOf(data)
		fm, fin, ok := readFast(data, start, true, p, nil, levels{})
		if !ok {
			return
		}
		gm, gin, err := readGeneral(data, true, p, nil, levels{})
		if err != nil {
			t.Fatalf("readFast took %q; jsontext refuses it: %v", data, err)
		}
		if !sameMembers(fm, gm) || !sameLevels(fin, gin) {
			t.Fatalf("%q down %q: by hand %q %q, by jsontext %q %q", data, p, fm, fin, gm, gin)
		}
	})
}

// sameVerdict: read, the hand reader first, gives the verdict and the
// members jsontext alone gives.
func sameVerdict(t *testing.T, data []byte) {
	_, _, err := read(data, false, path{}, nil, levels{})
	_, _, gerr := readGeneral(data, false, path{}, nil, levels{})
	if (err == nil) != (gerr == nil) {
		t.Fatalf("Check(%q) = %v; jsontext %v", data, err, gerr)
	}
	if data[Space(data, 0)] != '{' {
		return
	}
	// ObjectIn2, either way, gives Check's verdict and the same members.
	p := pathOf(data)
	m, in, oerr := read(data, true, p, nil, levels{})
	gm, gin, goerr := readGeneral(data, true, p, nil, levels{})
	if (oerr == nil) != (err == nil) || (goerr == nil) != (err == nil) {
		t.Fatalf("ObjectIn2(%q, %q) = %v, by jsontext %v; Check %v", data, p, oerr, goerr, err)
	}
	if oerr == nil && (!sameMembers(m, gm) || !sameLevels(in, gin)) {
		t.Fatalf("ObjectIn2(%q, %q) = %q %q; jsontext %q %q", data, p, m, in, gm, gin)
	}
}

// addGoldenLines seeds f with each line of the files the patterns match
// (a control transcript's "> " and "< " taken off).
func addGoldenLines(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil || len(files) == 0 {
			f.Fatalf("no golden files %s: %v", p, err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			for _, line := range bytes.Split(b, []byte("\n")) {
				line = bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("> ")), []byte("< "))
				if len(bytes.TrimSpace(line)) > 0 {
					f.Add(line)
				}
			}
		}
	}
}

func checkPrimitives(t *testing.T, data []byte, i int) {
	if s, end, ok := PlainString(data, i); ok {
		want, err := jsontext.AppendUnquote(nil, data[i:end])
		if err != nil || !bytes.Equal(s, want) {
			t.Fatalf("PlainString(%q) = %q; jsontext %q, %v", data, s, want, err)
		}
	}
	if n, end, ok := Int(data, i); ok {
		var want int64
		if err := json.Unmarshal(data[i:end], &want); err != nil || n != want || (end < len(data) && data[end] >= '0' && data[end] <= '9') {
			t.Fatalf("Int(%q) = %d, %d; encoding/json %d, %v", data, n, end, want, err)
		}
	}
}

// firstName is the first member's name in data, plain, or "".
func firstName(data []byte) string {
	if s, _, ok := PlainString(data, Space(data, Space(data, 0)+1)); ok {
		return string(s)
	}
	return ""
}

// pathOf is the path the differential tests read data down: its first
// name and, when that member is an object, the first name in it (a
// request's "args" and "app", a frame's envelope and "type").
func pathOf(data []byte) path {
	p := path{firstName(data)}
	if p[0] == "" {
		return p
	}
	top, _, err := readGeneral(data, true, path{}, nil, levels{})
	if err != nil || len(top) == 0 || top[0].Value[0] != '{' {
		return p
	}
	p[1] = firstName(top[0].Value)
	return p
}

func sameLevels(a, b levels) bool {
	for k := range a {
		if !sameMembers(a[k], b[k]) {
			return false
		}
	}
	return true
}

func sameMembers(a, b []Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Name, b[i].Name) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
