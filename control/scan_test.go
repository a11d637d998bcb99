package control

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeToolCallArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		want    ToolCallArgs
		wantErr string // substring; "" = valid
	}{
		{name: "usual", args: `{"app":"notes","call":{"call_id":"c1","name":"notes.search","args":{"q":"x"},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":"ctx","caller":"k"}}`,
			want: ToolCallArgs{App: "notes", Call: ToolCall{CallID: "c1", Name: "notes.search", Args: json.RawMessage(`{"q":"x"}`), Risk: "read", Confirm: "none", TimeoutMS: 5000, ContextID: "ctx", Caller: "k"}}},
		{name: "spaces and order", args: ` { "call" : { "timeout_ms" : -1 , "call_id" : "c" } , "app" : "a" } `,
			want: ToolCallArgs{App: "a", Call: ToolCall{CallID: "c", TimeoutMS: -1}}},
		{name: "escaped string", args: `{"app":"n\u006ftes","call":{"call_id":"c\n"}}`,
			want: ToolCallArgs{App: "notes", Call: ToolCall{CallID: "c\n"}}},
		{name: "null args", args: `{"app":"a","call":{"args":null}}`,
			want: ToolCallArgs{App: "a", Call: ToolCall{Args: json.RawMessage(`null`)}}},
		{name: "empty", args: ``},
		{name: "unknown member", args: `{"app":"a","cal":{}}`, wantErr: `args has no member "cal": rename it to "call"`},
		{name: "unknown call member", args: `{"app":"a","call":{"id":"x"}}`, wantErr: `args.call has no member "id": remove it`},
		{name: "wrong type", args: `{"app":1}`, wantErr: "args.app must be a string, not number"},
		{name: "fraction timeout", args: `{"call":{"timeout_ms":1.5}}`, wantErr: "args.call.timeout_ms must be an integer, not number 1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeToolCallArgs(json.RawMessage(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeToolCallArgs(%s) = %v, want an error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeToolCallArgs(%s): %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeToolCallArgs(%s) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

// FuzzDecodeToolCallArgs holds the strict decoder to DecodeArgs: what it
// accepts, DecodeArgs accepts as the same args.
func FuzzDecodeToolCallArgs(f *testing.F) {
	for _, s := range []string{
		`{"app":"notes","call":{"call_id":"c1","name":"notes.search","args":{"q":"x"},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":"ctx","caller":"k"}}`,
		`{"app":"a","call":{"args":[1,{"b":[]}],"timeout_ms":-0}}`,
		`{"app":"a","app":"b"}`,
		`{"App":"a"}`,
		`{"call":{"timeout_ms":01}}`,
		`{"call":{"timeout_ms":123456789012345678901}}`,
		`{"call":{"name":"\u00e9"}}`,
		`{}`, `null`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		fast, ok := strictToolCallArgs(args)
		if !ok {
			return
		}
		var slow ToolCallArgs
		if err := DecodeArgs(args, &slow); err != nil {
			t.Fatalf("fast path accepted %q as %+v; DecodeArgs refuses it: %v", args, fast, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast path decoded %q as %+v; DecodeArgs as %+v", args, fast, slow)
		}
	})
}

// tool.call's args read with the line (Request.ToolCallArgs) are the args
// DecodeToolCallArgs reads on their own, for each of the table's args and
// for a line of any op: the line's pass decodes only a tool.call's.
func TestToolCallArgsReadWithTheLine(t *testing.T) {
	usual := `{"app":"notes","call":{"call_id":"c1","name":"notes.search","args":{"q":"x"},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":"ctx","caller":"k"}}`
	for _, tt := range []struct {
		line     string
		withLine bool // decoded in the line's pass
	}{
		{`{"id":1,"op":"tool.call","args":` + usual + `}`, true},
		{`{"args":` + usual + `,"op":"tool.call","id":1}`, true},
		{`{"id":1,"op":"tool.call","args":{"app":"n\u006ftes","call":{"call_id":"c"}}}`, true}, // an escape: by jsontext, still in one pass
		{`{"id":1,"op":"tool.call","args":{"app":"a","call":{"id":"x"}}}`, false},              // DecodeArgs words it
		{`{"id":1,"op":"tool.call","args":{"app":1}}`, false},
		{`{"id":1,"op":"tool.call"}`, false},
		{`{"id":1,"op":"tool.cancel","args":` + usual + `}`, false},
	} {
		req, err := DecodeRequest([]byte(tt.line))
		if err != nil {
			t.Fatalf("DecodeRequest(%s): %v", tt.line, err)
		}
		if req.haveToolCall != tt.withLine {
			t.Errorf("DecodeRequest(%s) read the args with the line: %v, want %v", tt.line, req.haveToolCall, tt.withLine)
		}
		got, gerr := req.ToolCallArgs()
		want, werr := DecodeToolCallArgs(req.Args)
		if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Errorf("%s: with the line %+v, %v; alone %+v, %v", tt.line, got, gerr, want, werr)
		}
	}
}
