package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json/jsontext"

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

// argsWire is every member any method's args may have.
type argsWire struct {
	Account   text           `json:"account"`
	Title     text           `json:"title"`
	ContextID text           `json:"context_id"`
	TurnID    text           `json:"turn_id"`
	Input     jsontext.Value `json:"input"`
}

// methodArgs are the members each method takes, in sort order; * marks
// a required one.
var methodArgs = map[string][]string{
	policy.MethodSessionOpen:    {"account", "title"},
	policy.MethodSessionHistory: {"*context_id"},
	policy.MethodContextClose:   {"*context_id"},
	policy.MethodTurnStart:      {"*context_id", "*input"},
	policy.MethodTurnInterrupt:  {"*context_id", "*turn_id"},
}

// DecodeArgs reads the args of a request of method, strictly: a member
// the method does not take is an error.
func DecodeArgs(method string, raw json.RawMessage) (Args, error) {
	if raw == nil {
		raw = json.RawMessage("{}")
	}
	a := Args{Raw: raw}
	if jsontext.Value(raw).Kind() != '{' { // null too: jsonv2 would read it as {}
		return a, errors.New("args: want an object")
	}
	var w argsWire
	if err := unmarshal(raw, &w); err != nil {
		return a, wireRefusal(err, "args")
	}
	takes := methodArgs[method]
	present := map[string]bool{"account": w.Account.set, "context_id": w.ContextID.set, "input": w.Input != nil, "title": w.Title.set, "turn_id": w.TurnID.set}
	for _, t := range takes {
		if name := t[1:]; t[0] == '*' && !present[name] {
			return a, fmt.Errorf("args: missing %q", name)
		}
	}
	for _, name := range []string{"account", "context_id", "input", "title", "turn_id"} {
		if present[name] && !slices.Contains(takes, name) && !slices.Contains(takes, "*"+name) {
			return a, fmt.Errorf("args: unknown member %q", name)
		}
	}
	a.Account, a.Title, a.Input = w.Account.s, w.Title.s, json.RawMessage(w.Input)
	if len(a.Title) > 256 {
		return a, errors.New(`args: "title": over 256 bytes`)
	}
	for _, id := range []struct {
		v    text
		name string
	}{{w.ContextID, "context_id"}, {w.TurnID, "turn_id"}} {
		if id.v.set { // whether it must be is the method's, checked above
			if err := id.v.id("args", id.name); err != nil {
				return a, err
			}
		}
	}
	a.ContextID, a.TurnID = w.ContextID.s, w.TurnID.s
	return a, nil
}
