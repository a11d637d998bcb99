package daemon

import (
	"encoding/json"
	"time"
)

// The tests play an app on its hub the way an app does (docs/protocol.md,
// "Frames"): a line of JSON each way, {"octos_peer": {...}}, written and
// read with encoding/json. peer's own codec is internal to peer.

// hubDown is any frame the daemon sends an app; Type says which, and the
// members it has are set.
type hubDown struct {
	Type      string          `json:"type"`
	ReqID     string          `json:"req_id"`
	OK        bool            `json:"ok"`
	Data      json.RawMessage `json:"data"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Account   string          `json:"account"`
	ContextID string          `json:"context_id"`
	Client    string          `json:"client"`
	Caller    string          `json:"caller"`
	Reason    string          `json:"reason"`
}

// hubRequest and hubToolResult are the frames an app sends.
type hubRequest struct {
	ReqID  string          `json:"req_id"`
	Method string          `json:"method"`
	Args   json.RawMessage `json:"args,omitempty"`
}

type hubToolResult struct {
	CallID string          `json:"call_id"`
	OK     bool            `json:"ok"`
	Data   json.RawMessage `json:"data,omitempty"`
}

func (r *toolRig) appWrite(f any) {
	r.t.Helper()
	var typ string
	switch f.(type) {
	case *hubRequest:
		typ = "request"
	case *hubToolResult:
		typ = "tool_result"
	default:
		r.t.Fatalf("appWrite: %T is not a frame an app sends", f)
	}
	body, err := json.Marshal(f)
	if err != nil {
		r.t.Fatal(err)
	}
	// "type" first, as apps write it; the daemon reads members by name.
	line := `{"octos_peer":{"type":"` + typ + `",` + string(body[1:]) + "}\n"
	if _, err := r.hub.Write([]byte(line)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *toolRig) appNext() hubDown {
	r.t.Helper()
	r.hub.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.r.ReadBytes('\n')
	if err != nil {
		r.t.Fatal(err)
	}
	var env struct {
		Frame *hubDown `json:"octos_peer"`
	}
	if err := json.Unmarshal(line, &env); err != nil || env.Frame == nil {
		r.t.Fatalf("the app read %q: not a peer-link frame (%v)", line, err)
	}
	return *env.Frame
}
