package control

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestToolCallArgs(t *testing.T) {
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
		{name: "a member twice", args: `{"app":"a","call":{"name":"x","n\u0061me":"y"}}`, wantErr: "args.call.name is there twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{ID: 1, Op: OpToolCall, Args: json.RawMessage(tt.args)}
			got, err := toolCallArgs(req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ToolCallArgs(%s) = %v, want an error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ToolCallArgs(%s): %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ToolCallArgs(%s) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

// toolCallArgs decodes req's args as tool.call's, as the daemon does.
func toolCallArgs(req Request) (ToolCallArgs, error) {
	var a ToolCallArgs
	err := DecodeArgs(req.Args, &a)
	return a, err
}
