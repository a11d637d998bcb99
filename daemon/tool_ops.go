package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// The tool-call ops of the control socket (docs/control.md), a thin adapter over
// the peer package's relay seams. Their names and wire types are in
// package control, used here as they are; the few types below carry
// peer and policy values as they are instead, and marshal to control's
// (a test holds them to it).

// ToolCallArgs are tool.call's args.
type ToolCallArgs struct {
	App  string           `json:"app"`
	Call control.ToolCall `json:"call"`
}

// ContextsData is context.list's answer (args control.AppArgs): the
// app's open contexts, by id.
type ContextsData struct {
	Contexts []peer.ContextInfo `json:"contexts"`
}

// RulesData is rules's answer: the rules listed, or the ones revoked.
type RulesData struct {
	Rules []policy.Rule `json:"rules"`
}

// AuditData is audit's answer, oldest first.
type AuditData struct {
	Entries []policy.AuditEntry `json:"entries"`
}

const defaultAuditLimit = 100

// RegisterToolOps serves the tool-call ops with m. kernelOf returns the
// kernel session a connection attached (kernel.attach), nil when it did
// not: tool.call and tool.cancel need one, since the calls' events go to
// the kernel's connection (see WithToolEvents).
func RegisterToolOps(s *Server, m *peer.Manager, kernelOf func(*Conn) *peer.KernelSession) {
	t := toolOps{m: m, kernelOf: kernelOf}
	// The kernel's ops take effect in the order it sent them (a tool.call
	// then its tool.cancel); none of them waits on the disk.
	s.HandleOrdered(control.OpToolCall, t.call)
	s.HandleOrdered(control.OpToolCancel, t.cancel)
	s.HandleOrdered(control.OpContextOwner, t.contextOwner)
	s.HandleOrdered(control.OpContextList, t.contextList)
	s.HandleOrdered(control.OpLinkHas, t.linkHas)
	s.HandleOrdered(control.OpAccountClose, t.accountClose)
	s.Handle(control.OpRules, t.rules)
	s.Handle(control.OpAudit, t.audit)
}

// WithToolEvents makes a kernel connection's peer.Kernel also the tool
// relay: attach WithToolEvents(c, k) and the outcomes of tool calls
// (including the ones queued while no kernel was attached) arrive on c as
// tool.acknowledged and tool.finished events.
func WithToolEvents(c *Conn, k peer.Kernel) peer.Kernel {
	return withToolEvents(k, func(line []byte) error {
		if !c.sendEvent(line) {
			return errors.New("send a tool event: the connection is gone or too slow")
		}
		return nil
	})
}

// withToolEvents makes k the tool relay too; send queues an encoded event
// line and never blocks.
func withToolEvents(k peer.Kernel, send func(line []byte) error) peer.Kernel {
	return toolKernel{Kernel: k, toolEvents: toolEvents{send: send}}
}

type toolKernel struct {
	peer.Kernel
	toolEvents
}

// toolEvents is a peer.ToolRelay that writes events on a connection. Its
// methods are called with the peer Manager's lock held: send never
// blocks (a kernel that does not read is dropped). Every call makes two
// events, so they are encoded by appends (control.AppendToolEvent), not
// by json.Marshal.
type toolEvents struct {
	send func(line []byte) error
}

func (e toolEvents) Acknowledged(app, callID string) {
	e.emit(control.EventToolAcknowledged, control.ToolEvent{App: app, CallID: callID})
}

func (e toolEvents) Finished(app, callID string, r peer.Result) {
	ev := control.ToolEvent{App: app, CallID: callID, Outcome: r.Outcome.String(), Data: r.Data}
	if r.Error != nil {
		ev.Error = &control.Error{Code: r.Error.Code, Message: r.Error.Message}
	}
	e.emit(control.EventToolFinished, ev)
}

func (e toolEvents) emit(topic string, ev control.ToolEvent) {
	n := len(`{"event":"","app":"","call_id":"","outcome":"outcome_unknown","data":}`) + len(topic) + len(ev.App) + len(ev.CallID) + len(ev.Data)
	if ev.Error != nil {
		n += len(`,"error":{"code":"","message":""}`) + len(ev.Error.Code) + len(ev.Error.Message)
	}
	// A line of its own: the connection's queue holds it until written.
	line, err := control.AppendToolEvent(make([]byte, 0, n), topic, ev)
	if err != nil {
		// Only data an app sent that did not encode: the peer link
		// checked it, so this is a bug; the kernel's call still ends.
		line, _ = control.AppendToolEvent(nil, topic, control.ToolEvent{App: ev.App, CallID: ev.CallID, Outcome: ev.Outcome,
			Error: &control.Error{Code: peer.CodeInternal, Message: fmt.Sprintf("the daemon could not encode the call's result: %v", err)}})
	}
	e.send(line)
}

type toolOps struct {
	m        *peer.Manager
	kernelOf func(*Conn) *peer.KernelSession
}

// toolError is the control error of a peer refusal, with its stable code
// (not_connected, duplicate, unknown_context, declined, bad_request, ...).
// The message does not name the op: the client knows what it asked.
func toolError(err error) error {
	return control.Errorf(peer.Code(err), "%v", err)
}

func (t toolOps) kernel(op string, c *Conn) (*peer.KernelSession, error) {
	ks := t.kernelOf(c)
	if ks == nil {
		return nil, control.Errorf(control.CodeNotAttached, "%s: this connection is not the agent kernel: send kernel.attach first (the call's events go to the kernel's connection)", op)
	}
	return ks, nil
}

func (t toolOps) call(_ context.Context, c *Conn, raw json.RawMessage) (any, error) {
	ca, err := control.DecodeToolCallArgs(raw)
	if err != nil {
		return nil, err
	}
	args := ToolCallArgs{App: ca.App, Call: ca.Call}
	if err := needApp(control.OpToolCall, args.App); err != nil {
		return nil, err
	}
	// Both are the kernel's to say: a missing confirm must never mean
	// less confirmation than host, and the app must not be told of a
	// caller that is nobody.
	if args.Call.Confirm == "" {
		return nil, control.Errorf(control.CodeBadRequest, `args.call.confirm is missing: send "none" (the app runs it at once), "host" (the person approves first) or "app" (the app asks its person)`)
	}
	if args.Call.Caller == "" {
		return nil, control.Errorf(control.CodeBadRequest, "args.call.caller is missing: name who is calling (1 to 256 bytes), which the app is told")
	}
	ks, err := t.kernel(control.OpToolCall, c)
	if err != nil {
		return nil, err
	}
	place, err := ks.AcceptToolCall(args.App, args.Call)
	if err != nil {
		return nil, toolError(err)
	}
	// Answer "accepted" before the call's first event.
	return AfterReply(control.ToolCallData{CallID: args.Call.CallID, Accepted: true}, place), nil
}

func (t toolOps) cancel(_ context.Context, c *Conn, raw json.RawMessage) (any, error) {
	var args control.CallArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if err := needApp(control.OpToolCancel, args.App); err != nil {
		return nil, err
	}
	ks, err := t.kernel(control.OpToolCancel, c)
	if err != nil {
		return nil, err
	}
	if err := ks.ToolCancel(args.App, args.CallID); err != nil {
		return nil, toolError(err)
	}
	return struct{}{}, nil
}

func (t toolOps) contextOwner(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.ContextArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if err := needApp(control.OpContextOwner, args.App); err != nil {
		return nil, err
	}
	o, err := t.m.ContextOwner(args.App, args.ContextID)
	if err != nil {
		return nil, toolError(err)
	}
	return o, nil
}

func (t toolOps) contextList(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.AppArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if err := needApp(control.OpContextList, args.App); err != nil {
		return nil, err
	}
	return ContextsData{Contexts: t.m.Contexts(args.App)}, nil
}

func (t toolOps) linkHas(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.AppArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if err := needApp(control.OpLinkHas, args.App); err != nil {
		return nil, err
	}
	return control.LinkData{Connected: t.m.HasLink(args.App)}, nil
}

func (t toolOps) accountClose(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.AccountArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if err := needApp(control.OpAccountClose, args.App); err != nil {
		return nil, err
	}
	if args.Account == "" {
		return nil, control.Errorf(control.CodeBadRequest, "%s needs args.account, the account to close", control.OpAccountClose)
	}
	return control.AccountData{Closed: t.m.CloseAccount(args.App, args.Account)}, nil
}

func (t toolOps) rules(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.RulesArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	var rules []policy.Rule
	var err error
	switch args.Action {
	case "", "list":
		if args.Tool != "" {
			return nil, control.Errorf(control.CodeBadRequest, "rules list takes an app, not a tool")
		}
		rules, err = t.m.Rules(args.App)
	case "revoke":
		if args.App == "" {
			return nil, control.Errorf(control.CodeBadRequest, "rules revoke needs args.app (and args.tool, or every rule of the app goes)")
		}
		rules, err = t.m.RevokeRules(args.App, args.Tool)
	default:
		return nil, control.Errorf(control.CodeBadRequest, "rules: action %q: want \"list\" or \"revoke\"", args.Action)
	}
	if err != nil {
		return nil, fmt.Errorf("rules %s: %w", args.Action, err)
	}
	if rules == nil {
		rules = []policy.Rule{}
	}
	return RulesData{Rules: rules}, nil
}

func (t toolOps) audit(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.AuditArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.Limit < 0 {
		return nil, control.Errorf(control.CodeBadRequest, "audit: limit must be positive (or absent for the last %d)", defaultAuditLimit)
	}
	limit := args.Limit
	if limit == 0 {
		limit = defaultAuditLimit
	}
	entries, err := t.m.Audit(args.App, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return AuditData{Entries: entries}, nil
}
