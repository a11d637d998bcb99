package daemon

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"octosup/peer"
)

// TestAnswersMarshalToControlTypes holds the one peer value the daemon
// sends as it is, a kernel request (the request event's members), to the
// members a kernel decodes: every member the daemon sends is one it
// knows, with the same value. (Everything else the daemon sends, the
// approval event included, is control's types themselves.)
func TestAnswersMarshalToControlTypes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		daemon any
		wire   any
	}{
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
