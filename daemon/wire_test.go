package daemon

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer"
)

// TestAnswersMarshalToControlTypes holds the peer values the daemon
// sends as they are (an approval event, a kernel request) to the wire
// types of package control that octosupctl and other clients decode:
// every member the daemon sends is one control knows, with the same
// value. (The ops' answers are control's types themselves.)
func TestAnswersMarshalToControlTypes(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		daemon any
		wire   any
	}{
		{"approval", peer.Approval{ID: "n-a1", App: "a", Kind: "tool", State: "pending", Created: at, Expires: at}, &control.Approval{}},
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
