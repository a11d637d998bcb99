package control

import (
	"encoding/json"
	"testing"
)

// TestDecodeArgsWordsEachRefusal: a refused member is named with its
// path, what is wrong and the fix, never in the Go decoder's words.
func TestDecodeArgsWordsEachRefusal(t *testing.T) {
	type kernelError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	type reply struct {
		App   string       `json:"app"`
		OK    bool         `json:"ok"`
		Error *kernelError `json:"error,omitempty"`
	}
	tests := []struct {
		name string
		args string
		into any
		want string // the whole message; "" = accepted
	}{
		{"usual", `{"app":"notes"}`, &StatusArgs{}, ""},
		{"a typo", `{"topic":["state"]}`, &SubscribeArgs{}, `args has no member "topic": rename it to "topics" (names are exact); the members are topics`},
		{"a case variant", `{"App":"notes"}`, &AppArgs{}, `args has no member "App": rename it to "app" (names are exact); the members are app`},
		{"nothing close", `{"app":"notes","colour":1}`, &LogsArgs{}, `args has no member "colour": remove it; the members are app, lines, follow`},
		{"no args at all", `{"x":1}`, &struct{}{}, `args has no member "x": this op takes no args; send {} or leave args out`},
		{"nested", `{"app":"a","call":{"call_id":"c","confrm":"host"}}`, &ToolCallArgs{}, `args.call has no member "confrm": rename it to "confirm" (names are exact); the members are call_id, name, args, risk, confirm, timeout_ms, context_id, caller`},
		{"nested pointer", `{"app":"a","ok":false,"error":{"code":"x","msg":"y"}}`, &reply{}, `args.error has no member "msg": remove it; the members are code, message`},
		{"inside a raw value is the app's", `{"app":"a","call":{"args":{"Anything":1}}}`, &ToolCallArgs{}, ""},
		{"a string for a number", `{"app":"a","lines":"5"}`, &LogsArgs{}, `args.lines must be an integer, not string`},
		{"a fraction", `{"call":{"timeout_ms":1.5}}`, &ToolCallArgs{}, `args.call.timeout_ms must be an integer, not number 1.5`},
		{"a number for a string", `{"app":1}`, &AppArgs{}, `args.app must be a string, not number`},
		{"a string for a boolean", `{"app":"a","follow":"yes"}`, &LogsArgs{}, `args.follow must be true or false, not string`},
		{"a string for a list", `{"topics":"state"}`, &SubscribeArgs{}, `args.topics must be an array of strings, not string`},
		{"an item of the wrong type", `{"topics":["state",1]}`, &SubscribeArgs{}, `args.topics[1] must be a string, not number`},
		{"a member twice", `{"app":"a","app":"b"}`, &AppArgs{}, `args.app is there twice: send each member once`},
		{"not an object", `[1]`, &AppArgs{}, `args must be an object, not array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := DecodeArgs(json.RawMessage(tt.args), tt.into)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("DecodeArgs(%s): %v", tt.args, err)
				}
				return
			}
			cerr, ok := err.(*Error)
			if !ok || cerr.Code != CodeBadRequest || cerr.Message != tt.want {
				t.Fatalf("DecodeArgs(%s) = %#v\nwant bad_request %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestDecodeArgsTakesHalfASurrogatePair: args take a \u escape of half a
// surrogate pair, as the hub does, and still refuse a byte that is not
// UTF-8.
func TestDecodeArgsTakesHalfASurrogatePair(t *testing.T) {
	var a struct {
		Event json.RawMessage `json:"event"`
	}
	if err := DecodeArgs(json.RawMessage(`{"event":{"text":"\ud800"}}`), &a); err != nil || string(a.Event) != `{"text":"\ud800"}` {
		t.Fatalf("DecodeArgs: %v, event %s", err, a.Event)
	}
	if err := DecodeArgs(json.RawMessage("{\"event\":\"\xff\"}"), &a); err == nil {
		t.Fatal("DecodeArgs took a byte that is not UTF-8")
	}
}
