package control

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"octosup/internal/strictjson"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Request
		wantErr string // substring; "" = valid
	}{
		{name: "status", line: `{"id":1,"op":"status"}`, want: Request{ID: 1, Op: "status"}},
		{name: "args", line: `{"id":7,"op":"start","args":{"app":"notes"}}`, want: Request{ID: 7, Op: "start", Args: json.RawMessage(`{"app":"notes"}`)}},
		{name: "null args", line: `{"id":2,"op":"status","args":null}`, want: Request{ID: 2, Op: "status"}},
		{name: "spaces", line: ` { "id" : 3 , "op" : "reload" } `, want: Request{ID: 3, Op: "reload"}},
		{name: "not json", line: `hello`, wantErr: "the line is not a JSON object"},
		{name: "empty object", line: `{}`, wantErr: "id must be a positive integer"},
		{name: "array", line: `[1,2]`, wantErr: "the line is not a JSON object"},
		{name: "string id", line: `{"id":"1","op":"status"}`, wantErr: `id must be a positive integer (up to 2^63-1), got "1": this answer's id is null`},
		{name: "case variant id", line: `{"Id":3,"op":"status"}`, wantErr: `the request has no member "Id" (rename it to "id": names are exact)`},
		{name: "twice", line: `{"id":3,"op":"status","id":4}`, wantErr: `the request has "id" twice`},
		// A member twice refuses the line with id null whatever the strict
		// reading stopped at first: the answer must not carry an id another
		// request of the client's may have.
		{name: "twice after an unknown member", line: `{"id":1,"x":0,"id":2,"op":"status"}`, wantErr: `the request has "id" twice`},
		{name: "twice after a wrong op", line: `{"id":1,"op":5,"id":2}`, wantErr: `the request has "id" twice`},
		{name: "twice after a twice deeper", line: `{"id":1,"args":{"a":1,"a":2},"id":2,"op":"status"}`, wantErr: `the request has "id" twice`},
		{name: "twice after a byte not UTF-8", line: "{\"id\":1,\"op\":\"st\xffatus\",\"id\":2}", wantErr: `the request has "id" twice`},
		{name: "twice, spelled apart", line: `{"id":1,"op":"status","\u0069d":2}`, wantErr: `the request has "id" twice`},
		// Half a surrogate pair in an escape is taken, as on the hub: an
		// app's text reaches the kernel and comes back.
		{name: "half a surrogate pair", line: `{"id":19,"op":"request.event","args":{"event":{"text":"\ud800"}}}`, want: Request{ID: 19, Op: "request.event", Args: json.RawMessage(`{"event":{"text":"\ud800"}}`)}},
		{name: "two names not UTF-8 keep the id", line: "{\"id\":21,\"op\":\"status\",\"x\xff\":1,\"x\xfe\":2}", want: Request{ID: 21, Op: "status"}, wantErr: "not valid JSON"},
		{name: "past jsontext's depth keeps the id", line: `{"id":22,"op":"status","args":{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`, want: Request{ID: 22}, wantErr: "nested deeper than 32 levels"},
		{name: "past jsontext's depth with an id not usable", line: `{"id":-5,"op":"status","args":{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`, wantErr: "nested deeper than 32 levels"},
		{name: "zero id", line: `{"id":0,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "negative id", line: `{"id":-4,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "fraction id", line: `{"id":1.5,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "no op", line: `{"id":9}`, want: Request{ID: 9}, wantErr: "op must be a non-empty string"},
		{name: "op not string", line: `{"id":9,"op":3}`, want: Request{ID: 9}, wantErr: "op must be a non-empty string"},
		{name: "args array", line: `{"id":5,"op":"status","args":[1]}`, want: Request{ID: 5, Op: "status"}, wantErr: "args must be an object"},
		{name: "unknown member keeps id", line: `{"id":11,"op":"status","extra":1}`, want: Request{ID: 11}, wantErr: `the request has no member "extra": a request has only id, op and args`},
		{name: "second value", line: `{"id":12,"op":"status"} {"id":13}`, want: Request{ID: 12}, wantErr: "more than one JSON value"},
		{name: "truncated", line: `{"id":14,"op":"sta`, wantErr: "the line is not valid JSON (unexpected EOF)"},
		{name: "truncated, not UTF-8", line: "{\"id\":14,\"op\":\"\xff", wantErr: "the line is not valid JSON"},
		{name: "unknown member first keeps id", line: `{"extra":1,"id":15,"op":"status"}`, want: Request{ID: 15}, wantErr: `the request has no member "extra"`},
		{name: "text after", line: `{"id":16,"op":"status"} trailing`, want: Request{ID: 16}, wantErr: "more than one JSON value"},
		{name: "twice deeper keeps id", line: `{"args":{"a":{"b":1,"\u0062":2}},"id":17,"op":"status"}`, want: Request{ID: 17, Op: "status", Args: json.RawMessage(`{"a":{"b":1,"\u0062":2}}`)}, wantErr: "args.a.b is there twice: send each member once"},
		{name: "not UTF-8 keeps id", line: "{\"id\":18,\"op\":\"status\",\"args\":{\"a\":\"\xff\"}}", want: Request{ID: 18, Op: "status", Args: json.RawMessage("{\"a\":\"\xff\"}")}, wantErr: "the line is not valid JSON (invalid UTF-8)"},
		{name: "32 levels", line: `{"id":19,"op":"x","args":{"a":` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `}}`, want: Request{ID: 19, Op: "x", Args: json.RawMessage(`{"a":` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `}`)}},
		{name: "33 levels", line: `{"id":20,"op":"x","args":{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}}`, want: Request{ID: 20, Op: "x", Args: json.RawMessage(`{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`)}, wantErr: "the line is not valid JSON (nested deeper than 32 levels)"},
		{name: "brackets in a string", line: `{"id":21,"op":"x","args":{"a":"` + strings.Repeat("[", 40) + `"}}`, want: Request{ID: 21, Op: "x", Args: json.RawMessage(`{"a":"` + strings.Repeat("[", 40) + `"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tt.line))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeRequest(%s): %v", tt.line, err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeRequest(%s) error = %v, want it to contain %q", tt.line, err, tt.wantErr)
				}
			}
			if got.ID != tt.want.ID || got.Op != tt.want.Op || string(got.Args) != string(tt.want.Args) {
				t.Fatalf("DecodeRequest(%s) = %+v, want %+v", tt.line, got, tt.want)
			}
		})
	}
}

// FuzzDecodeRequest holds DecodeRequest to its contract, and what it
// accepts to encoding/json's reading of the same line: the same id, op
// and args, and for a tool.call the same args as ToolCallArgs decodes.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"op":"status"}`,
		`{"id":7,"op":"start","args":{"app":"notes"}}`,
		`{"id":2,"op":"logs","args":{"app":"clock","lines":5,"follow":true}}`,
		`{"id":3,"op":"subscribe","args":{"topics":["state","approval"]}}`,
		`{"id":1,"op":"status","extra":true}`,
		`{"extra":true,"id":1,"op":"status"}`,
		`{"id":1e3,"op":"status"}`,
		`{"id":1,"op":"status"}{}`,
		`{"id":9223372036854775808,"op":"x"}`,
		"{\"id\":1,\"op\":\"\xff\"}",
		"{\"id\":1,\"op\":\"\xff",
		`null`, `[]`, `"x"`, ``,
		` { "op" : "tool.call" , "args" : {"app":"notes","call":{"call_id":"c1","args":{"q":[1,-2.5e3,true,null,"\u00e9"]}}}, "id" : 42 } `,
		`{"id":3,"op":"status","args":null}`,
		`{"id":3,"op":"status","id":4}`,
		`{"id":3,"op":"status","args":{"a":1,"\u0061":2}}`,
		`{"id":3,"op":"status","args":{"a":"\ud800"}}`,
		`{"Id":3,"op":"status"}`,
		`{"id":3,"op":"st\u0061tus"}`,
		`{"id":123456789012345678,"op":"x"}`,
		`{"id":1,"op":"x","args":{"a":{"b":{"c":[[[{}]]]}}}}`,
		`{"id":1,"op":"x","args":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`,
		`{"id":1234,"op":"tool.call","args":{"app":"tools","call":{"call_id":"b12345","name":"bench.echo","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":"ctx-0123456789abcdef","caller":"bench"}}}`,
		`{"id":1,"op":"tool.call","args":{"app":"a","call":{"args":[1,{"b":[]}],"timeout_ms":-0}}}`,
		`{"id":1,"op":"tool.call","args":{"app":"a","app":"b"}}`,
		`{"id":1,"op":"tool.call","args":{"App":"a"}}`,
		`{"id":1,"op":"tool.call","args":{"call":{"timeout_ms":01}}}`,
		`{"id":1,"op":"tool.call","args":{"call":{"timeout_ms":123456789012345678901}}}`,
		`{"id":1,"op":"tool.call","args":{"call":{"name":"\u00e9"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := DecodeRequest(line)
		if err != nil {
			if req.ID < 0 {
				t.Fatalf("negative id %d recovered", req.ID)
			}
			// An attributed refusal carries the id encoding/json reads in
			// the line's first value.
			if req.ID > 0 {
				var members map[string]json.RawMessage
				derr := json.NewDecoder(bytes.NewReader(line)).Decode(&members)
				if derr != nil || string(members["id"]) != strconv.FormatInt(req.ID, 10) {
					t.Fatalf("%q refused (%v) with id %d; encoding/json reads the id %s, %v", line, err, req.ID, members["id"], derr)
				}
			}
			if strings.Contains(err.Error(), "nested deeper") && !stackDeeper(line) {
				t.Fatalf("%q refused (%v), but it is not nested too deep", line, err)
			}
			return
		}
		if req.ID <= 0 || req.Op == "" {
			t.Fatalf("accepted %q as %+v", line, req)
		}
		if len(req.Args) > 0 && req.Args[0] != '{' {
			t.Fatalf("accepted non-object args %s", req.Args)
		}
		// encoding/json reads the line as the same request, with no
		// other member.
		var members map[string]json.RawMessage
		var v1 Request
		if err := json.Unmarshal(line, &members); err != nil {
			t.Fatalf("accepted %q; encoding/json refuses it: %v", line, err)
		}
		if err := json.Unmarshal(line, &v1); err != nil {
			t.Fatalf("accepted %q; encoding/json refuses it as a request: %v", line, err)
		}
		if string(v1.Args) == "null" {
			v1.Args = nil
		}
		if v1.ID != req.ID || v1.Op != req.Op || string(v1.Args) != string(req.Args) {
			t.Fatalf("decoded %q as %+v; encoding/json as %+v", line, req, v1)
		}
		for k := range members {
			if k != "id" && k != "op" && k != "args" {
				t.Fatalf("accepted %q with member %q", line, k)
			}
		}
		// tool.call's args are encoding/json's reading of them.
		if a, err := toolCallArgs(req); err == nil {
			var want ToolCallArgs
			if err := json.Unmarshal(req.Args, &want); len(req.Args) > 0 && (err != nil || !reflect.DeepEqual(a, want)) {
				t.Fatalf("%q: args decoded as %+v; by encoding/json as %+v, %v", line, a, want, err)
			}
		}
		// What was accepted re-encodes and decodes to the same request.
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", req, err)
		}
		again, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("re-decode %s: %v", b, err)
		}
		if again.ID != req.ID || again.Op != req.Op {
			t.Fatalf("round trip %+v -> %+v", req, again)
		}
	})
}

func TestEncodeEvent(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		body  any
		want  string
	}{
		{"object", "state", StateEvent{App: "notes", State: "running", Pid: 4}, `{"event":"state","app":"notes","state":"running","pid":4,"restarts":0,"since":"0001-01-01T00:00:00Z"}`},
		{"empty object", "ping", struct{}{}, `{"event":"ping"}`},
		{"map", "app.frame", map[string]any{"app": "x", "frame": map[string]int{"a": 1}}, `{"event":"app.frame","app":"x","frame":{"a":1}}`},
		{"not an object", "n", 3, `{"event":"n","data":3}`},
		{"nil", "n", nil, `{"event":"n","data":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeEvent(tt.topic, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("EncodeEvent = %s\nwant          %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
		})
	}
}

// stackDeeper is the fuzz's own reading of nesting, by jsontext's token
// stack: whether line goes past strictjson.MaxDepth levels before it ends
// or stops being JSON.
func stackDeeper(line []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(line), lenient)
	for dec.StackDepth() <= strictjson.MaxDepth {
		if _, err := dec.ReadToken(); err != nil {
			return strictjson.PastMaxDepth(err)
		}
	}
	return true
}
