package frame

import (
	"encoding/json"
	"strings"
	"testing"

	"octosup/policy"
)

func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		method, args string
		bad          string // substring of the refusal; "" = accepted
		want         Args
	}{
		{method: policy.MethodSessionOpen, args: `{"account":"me","title":"t"}`, want: Args{Account: "me", Title: "t"}},
		{method: policy.MethodSessionOpen, args: ``, want: Args{}},
		{method: policy.MethodSessionOpen, args: `{"title":"` + strings.Repeat("x", 257) + `"}`, bad: `"title": over 256 bytes`},
		{method: policy.MethodSessionOpen, args: `{"context_id":"c"}`, bad: `args: unknown member "context_id"`},
		{method: policy.MethodSessionOpen, args: `{"Account":"me"}`, bad: `args: unknown member "Account"`},
		{method: policy.MethodSessionOpen, args: `{"account":null}`, bad: `args: "account": want a string`},
		{method: policy.MethodSessionOpen, args: `null`, bad: `args: want an object`},
		{method: policy.MethodTurnStart, args: `{"context_id":"c1","input":{"text":"hi"}}`, want: Args{ContextID: "c1", Input: json.RawMessage(`{"text":"hi"}`)}},
		{method: policy.MethodTurnStart, args: `{"context_id":"c1"}`, bad: `args: missing "input"`},
		{method: policy.MethodTurnInterrupt, args: `{"context_id":"c1","turn_id":""}`, bad: `"turn_id": want 1 to 128 printable ASCII`},
		{method: policy.MethodContextClose, args: `{}`, bad: `args: missing "context_id"`},
		{method: "octos.unknown", args: `{"account":"me"}`, bad: `args: unknown member "account"`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.args, func(t *testing.T) {
			var raw json.RawMessage
			if tt.args != "" {
				raw = json.RawMessage(tt.args)
			}
			got, err := DecodeArgs(tt.method, raw)
			if tt.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("DecodeArgs = %+v, %v; want a refusal with %q", got, err, tt.bad)
				}
				return
			}
			got.Raw = nil
			if err != nil || string(got.Input) != string(tt.want.Input) || got.Account != tt.want.Account || got.Title != tt.want.Title || got.ContextID != tt.want.ContextID || got.TurnID != tt.want.TurnID {
				t.Fatalf("DecodeArgs = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
