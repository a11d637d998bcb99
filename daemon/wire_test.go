package daemon

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"octosup/control"
	"octosup/jail"
	"octosup/peer"
	"octosup/policy"
)

// TestAnswersMarshalToControlTypes holds the daemon's answer and args
// types, which carry peer and policy values as they are, to the wire
// types of package control that octosupctl and other clients decode:
// every member the daemon sends is one control knows, with the same
// value.
func TestAnswersMarshalToControlTypes(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		daemon any
		wire   any
	}{
		{"tool.call args", ToolCallArgs{App: "a", Call: control.ToolCall{CallID: "c", Name: "t", Args: json.RawMessage(`{"q":1}`), Risk: "read", Confirm: "host", TimeoutMS: 5, ContextID: "n-1", Caller: "k"}}, &control.ToolCallArgs{}},
		{"context.owner answer", peer.ContextOwner{Account: "personal", Client: "c"}, &control.ContextOwner{}},
		{"context.list answer", ContextsData{Contexts: []peer.ContextInfo{{ContextID: "n-1", Account: "personal", Client: "c"}}}, &control.ContextsData{}},
		{"rules answer", RulesData{Rules: []policy.Rule{{App: "a", Tool: "t", Decision: policy.Allow, At: at}}}, &control.RulesData{}},
		{"audit answer", AuditData{Entries: []policy.AuditEntry{{Seq: 1, App: "a", Tool: "t", CallID: "c", Risk: "write", Confirm: "app", Decision: "sheet", Approved: "allow", Outcome: "error", Error: "declined", End: "finished", Account: "personal", ContextID: "n-1", Caller: "k", Started: at, DurationMS: 1.5}}}, &control.AuditData{}},
		{"jail answer", JailData{Spec: jail.Spec{}, Text: "app x"}, &control.JailData{}},
		{"approval", peer.Approval{ID: "n-a1", App: "a", Kind: "tool", State: "pending", Created: at, Expires: at}, &control.Approval{}},
		{"consent", policy.Consent{App: "a", Decision: policy.Deny, At: at}, &control.Consent{}},
		{"kernel request", peer.KernelRequest{App: "a", ReqID: "r", Method: "octos.turn.start", Args: json.RawMessage(`{}`), ContextID: "n-1", Account: "personal"}, &struct {
			App       string          `json:"app"`
			ReqID     string          `json:"req_id"`
			Method    string          `json:"method"`
			Args      json.RawMessage `json:"args"`
			ContextID string          `json:"context_id"`
			Account   string          `json:"account"`
		}{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent, err := json.Marshal(tc.daemon)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(sent))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tc.wire); err != nil {
				t.Fatalf("%s does not decode into %T: %v", sent, tc.wire, err)
			}
			again, err := json.Marshal(tc.wire)
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			json.Unmarshal(sent, &a)
			json.Unmarshal(again, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("sent %s\nclient re-encodes %s", sent, again)
			}
		})
	}
}
