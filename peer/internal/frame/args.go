package frame

import (
	"encoding/json"

	"octosup/policy"
)

// Args holds the decoded args of any request method (docs/protocol.md,
// "Methods"); each method reads its own members.
type Args struct {
	Account   string
	Title     string
	ContextID string
	TurnID    string
	Input     json.RawMessage
	Raw       json.RawMessage // as the app sent them, for the kernel
}

// DecodeArgs reads the args of a request of method, strictly: a member
// the method does not take is an error.
func DecodeArgs(method string, raw json.RawMessage) (Args, error) {
	if raw == nil {
		raw = json.RawMessage("{}")
	}
	o := newObject("args", raw)
	a := Args{Raw: raw}
	switch method {
	case policy.MethodSessionOpen:
		a.Account = o.str("account", false)
		a.Title = o.str("title", false)
		if o.err == nil && len(a.Title) > 256 {
			o.fail(`"title": over 256 bytes`)
		}
	case policy.MethodSessionHistory, policy.MethodContextClose:
		a.ContextID = o.id("context_id", true)
	case policy.MethodTurnStart:
		a.ContextID = o.id("context_id", true)
		a.Input = o.raw("input", true)
	case policy.MethodTurnInterrupt:
		a.ContextID = o.id("context_id", true)
		a.TurnID = o.id("turn_id", true)
	}
	return a, o.done()
}
