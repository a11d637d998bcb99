package control

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
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
		{name: "zero id", line: `{"id":0,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "negative id", line: `{"id":-4,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "fraction id", line: `{"id":1.5,"op":"status"}`, wantErr: "id must be a positive integer"},
		{name: "no op", line: `{"id":9}`, want: Request{ID: 9}, wantErr: "op must be a non-empty string"},
		{name: "op not string", line: `{"id":9,"op":3}`, want: Request{ID: 9}, wantErr: "op must be a non-empty string"},
		{name: "args array", line: `{"id":5,"op":"status","args":[1]}`, want: Request{ID: 5, Op: "status"}, wantErr: "args must be an object"},
		{name: "unknown member keeps id", line: `{"id":11,"op":"status","extra":1}`, want: Request{ID: 11}, wantErr: `the request has no member "extra": a request has only id, op and args`},
		{name: "second value", line: `{"id":12,"op":"status"} {"id":13}`, want: Request{ID: 12}, wantErr: "more than one JSON value"},
		{name: "truncated", line: `{"id":14,"op":"sta`, wantErr: "the line is not valid JSON (unexpected EOF)"},
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
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("error %v does not wrap ErrBadRequest", err)
				}
			}
			if got.ID != tt.want.ID || got.Op != tt.want.Op || string(got.Args) != string(tt.want.Args) {
				t.Fatalf("DecodeRequest(%s) = %+v, want %+v", tt.line, got, tt.want)
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"op":"status"}`,
		`{"id":7,"op":"start","args":{"app":"notes"}}`,
		`{"id":2,"op":"logs","args":{"app":"clock","lines":5,"follow":true}}`,
		`{"id":3,"op":"subscribe","args":{"topics":["state","approval"]}}`,
		`{"id":1,"op":"status","extra":true}`,
		`{"id":1e3,"op":"status"}`,
		`{"id":1,"op":"status"}{}`,
		`{"id":9223372036854775808,"op":"x"}`,
		"{\"id\":1,\"op\":\"\xff\"}",
		`null`, `[]`, `"x"`, ``,
		` { "op" : "tool.call" , "args" : {"app":"notes","call":{"call_id":"c1","args":{"q":[1,-2.5e3,true,null,"\u00e9"]}}}, "id" : 42 } `,
		`{"id":3,"op":"status","args":null}`,
		`{"id":3,"op":"status","id":4}`,
		`{"Id":3,"op":"status"}`,
		`{"id":3,"op":"st\u0061tus"}`,
		`{"id":123456789012345678,"op":"x"}`,
		`{"id":1,"op":"x","args":{"a":{"b":{"c":[[[{}]]]}}}}`,
		`{"id":1234,"op":"tool.call","args":{"app":"tools","call":{"call_id":"b12345","name":"bench.echo","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":"ctx-0123456789abcdef","caller":"bench"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		// The strict reading accepts only what encoding/json accepts,
		// as the same request.
		if fast, ok, _ := strictRequest(line); ok {
			slow, err := decodeRequestSlow(line)
			if err != nil {
				t.Fatalf("fast path accepted %q as %+v; encoding/json refuses it: %v", line, fast, err)
			}
			if fast.ID != slow.ID || fast.Op != slow.Op || string(fast.Args) != string(slow.Args) {
				t.Fatalf("fast path decoded %q as %+v; encoding/json as %+v", line, fast, slow)
			}
			// tool.call's args read with the line are the args read alone.
			if fast.haveToolCall {
				alone, err := DecodeToolCallArgs(fast.Args)
				if err != nil || !reflect.DeepEqual(fast.toolCall, alone) {
					t.Fatalf("%q: args read with the line %+v; alone %+v, %v", line, fast.toolCall, alone, err)
				}
			}
		}
		req, err := DecodeRequest(line)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			if req.ID < 0 {
				t.Fatalf("negative id %d recovered", req.ID)
			}
			return
		}
		if req.ID <= 0 || req.Op == "" {
			t.Fatalf("accepted %q as %+v", line, req)
		}
		if len(req.Args) > 0 && req.Args[0] != '{' {
			t.Fatalf("accepted non-object args %s", req.Args)
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
