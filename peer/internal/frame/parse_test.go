package frame

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestToolResult: ParseLine decodes a tool_result's every form, in any
// order and spelling of its members, and refuses what the link does not
// define.
func TestToolResult(t *testing.T) {
	tests := []struct {
		name string
		line string
		want *ToolResult // nil: refused
	}{
		{"ok with data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"hits":[1,"x"]}}}`,
			&ToolResult{CallID: "c1", OK: true, Data: []byte(`{"hits":[1,"x"]}`)}},
		{"ok without data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true}}`, &ToolResult{CallID: "c1", OK: true}},
		{"other order, spaces", ` { "octos_peer" : { "data" : null , "ok" : true , "call_id" : "c 1" , "type" : "tool_result" } } `,
			&ToolResult{CallID: "c 1", OK: true, Data: []byte(`null`)}},
		{"awaiting", `{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":true}}`,
			&ToolResult{CallID: "c1", AwaitingConfirmation: true}},
		{"error result", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false,"error":{"code":"x","message":"y"}}}`,
			&ToolResult{CallID: "c1", Error: &Error{Code: "x", Message: "y"}}},
		{"escaped key", `{"octos_peer":{"type":"tool_result","call_\u0069d":"c1","ok":true}}`, &ToolResult{CallID: "c1", OK: true}},
		{"duplicate key", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"ok":true}}`, nil},
		{"duplicate key in data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"a":1,"a":2}}}`, nil},
		{"unknown member", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"app":"x"}}`, nil},
		{"second top member", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true},"x":1}`, nil},
		{"awaiting and ok", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"awaiting_confirmation":true}}`, nil},
		{"no call id", `{"octos_peer":{"type":"tool_result","ok":true}}`, nil},
		{"bad call id", `{"octos_peer":{"type":"tool_result","call_id":"","ok":true}}`, nil},
		{"text after", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true}} {}`, nil},
		{"invalid UTF-8", "{\"octos_peer\":{\"type\":\"tool_result\",\"call_id\":\"c1\",\"ok\":true,\"data\":\"\xff\"}}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, pass, err := ParseLine([]byte(tt.line))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("ParseLine(%s) = %+v, %v; want it refused", tt.line, got, pass)
				}
				return
			}
			if err != nil || pass || !reflect.DeepEqual(got, Up(tt.want)) {
				t.Fatalf("ParseLine(%s) = %+v, %v, %v; want %+v", tt.line, got, pass, err, tt.want)
			}
		})
	}
}

// FuzzParseLine holds ParseLine's frames to encoding/json's reading of
// the same line: whatever ParseLine accepts as a request or a
// tool_result, encoding/json reads as the same members.
func FuzzParseLine(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":true}}`))
	f.Add([]byte(`{"octos_peer":{"ok":true,"type":"tool_result","call_id":"c1","data":"\u00e9"}}`))
	f.Add([]byte(`{"octos_peer":{"type":"request","req_id":"r1","method":"m","args":{"a":"\u00e9"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		up, _, err := ParseLine(line)
		if err != nil || up == nil {
			return
		}
		var ref struct {
			Peer struct {
				Type                 string          `json:"type"`
				ReqID                string          `json:"req_id"`
				Method               string          `json:"method"`
				Args                 json.RawMessage `json:"args"`
				CallID               string          `json:"call_id"`
				AwaitingConfirmation bool            `json:"awaiting_confirmation"`
				OK                   bool            `json:"ok"`
				Data                 json.RawMessage `json:"data"`
				Error                *Error          `json:"error"`
			} `json:"octos_peer"`
		}
		if err := json.Unmarshal(line, &ref); err != nil {
			t.Fatalf("ParseLine accepted %q as %+v; encoding/json refuses it: %v", line, up, err)
		}
		p := ref.Peer
		if r, ok := up.(*Request); ok {
			want := &Request{ReqID: p.ReqID, Method: p.Method, Args: p.Args}
			if p.Type != TypeRequest || !reflect.DeepEqual(r, want) {
				t.Fatalf("ParseLine decoded %q as %+v; encoding/json as %+v (type %q)", line, r, want, p.Type)
			}
			return
		}
		got := up.(*ToolResult)
		want := &ToolResult{CallID: p.CallID, AwaitingConfirmation: p.AwaitingConfirmation, OK: p.OK, Data: p.Data, Error: p.Error}
		if len(want.Data) == 0 {
			want.Data = nil
		}
		if p.Type != TypeToolResult || !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseLine decoded %q as %+v; encoding/json as %+v (type %q)", line, got, want, p.Type)
		}
	})
}
