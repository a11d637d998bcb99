package peer

import (
	"reflect"
	"testing"
)

func TestFastToolResult(t *testing.T) {
	tests := []struct {
		name string
		line string
		want *ToolResult // nil: left to the strict decoder
	}{
		{"ok with data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"hits":[1,"x"]}}}`,
			&ToolResult{CallID: "c1", OK: true, Data: []byte(`{"hits":[1,"x"]}`)}},
		{"ok without data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true}}`, &ToolResult{CallID: "c1", OK: true}},
		{"other order, spaces", ` { "octos_peer" : { "data" : null , "ok" : true , "call_id" : "c 1" , "type" : "tool_result" } } `,
			&ToolResult{CallID: "c 1", OK: true, Data: []byte(`null`)}},
		{"awaiting", `{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":true}}`,
			&ToolResult{CallID: "c1", AwaitingConfirmation: true}},
		{"error result", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false,"error":{"code":"x","message":"y"}}}`, nil},
		{"request", `{"octos_peer":{"type":"request","req_id":"r","method":"m"}}`, nil},
		{"duplicate key", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"ok":true}}`, nil},
		{"duplicate key in data", `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"a":1,"a":2}}}`, nil},
		{"escaped key", `{"octos_peer":{"type":"tool_result","call_\u0069d":"c1","ok":true}}`, nil},
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
			got, ok := fastToolResult([]byte(tt.line))
			if tt.want == nil {
				if ok {
					t.Fatalf("fastToolResult(%s) = %+v, want it left to the strict decoder", tt.line, got)
				}
				return
			}
			if !ok || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fastToolResult(%s) = %+v, %v; want %+v", tt.line, got, ok, tt.want)
			}
			strict, pass, err := parseLineStrict([]byte(tt.line))
			if err != nil || pass || !reflect.DeepEqual(strict, got) {
				t.Fatalf("the strict decoder gives %+v, %v, %v", strict, pass, err)
			}
		})
	}
}

// FuzzFastToolResult holds the one-pass tool_result decoder to the
// strict one: whatever it accepts, parseLineStrict accepts as the same
// frame.
func FuzzFastToolResult(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"data":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":true}}`))
	f.Add([]byte(`{"octos_peer":{"ok":true,"type":"tool_result","call_id":"c1","data":"\u00e9"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := fastToolResult(line)
		if !ok {
			return
		}
		strict, pass, err := parseLineStrict(line)
		if err != nil || pass {
			t.Fatalf("fast path accepted %q as %+v; the strict decoder: passthrough %v, %v", line, fast, pass, err)
		}
		if !reflect.DeepEqual(Up(fast), strict) {
			t.Fatalf("fast path decoded %q as %+v; the strict decoder as %+v", line, fast, strict)
		}
	})
}
