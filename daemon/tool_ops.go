package daemon

import (
	"cmp"
	"context"
	"fmt"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// The tool-call ops (docs/control.md): a thin adapter converting the
// peer relay's values to package control's wire types.

const defaultAuditLimit = 100

// registerToolOps serves the tool-call ops. tool.call and tool.cancel
// need the attached kernel's connection, where the calls' events go.
func (t *peerLink) registerToolOps(s *Server) {
	// In the kernel's order (a tool.call, then its tool.cancel); none of
	// these waits on the disk.
	s.handleOrdered(control.OpToolCall, withArgs(t.call))
	s.handleOrdered(control.OpToolCancel, withArgs(t.cancel))
	s.handleOrdered(control.OpContextOwner, withArgs(t.contextOwner))
	s.handleOrdered(control.OpContextList, withArgs(t.contextList))
	s.handleOrdered(control.OpLinkHas, withArgs(t.linkHas))
	s.handleOrdered(control.OpAccountClose, withArgs(t.accountClose))
	s.handle(control.OpRules, withArgs(t.rules))
	s.handle(control.OpAudit, withArgs(t.audit))
}

// connKernel is the tool relay too: outcomes, including those kept while
// no kernel was attached, become tool.acknowledged and tool.finished
// events. Run under the relay's and (mostly) an app's peer lock
// (peer/doc.go, rule 4), these never block. Two events a call: encoded
// by appends (control.AppendToolEvent), not json.Marshal.
var _ peer.ToolRelay = (*connKernel)(nil)

func (k *connKernel) Acknowledged(app, callID string) {
	k.toolEvent(control.EventToolAcknowledged, control.ToolEvent{App: app, CallID: callID})
}

func (k *connKernel) Finished(app, callID string, r peer.Result) {
	ev := control.ToolEvent{App: app, CallID: callID, Outcome: r.Outcome.String(), Data: r.Data}
	if r.Error != nil {
		ev.Error = &control.Error{Code: r.Error.Code, Message: r.Error.Message}
	}
	k.toolEvent(control.EventToolFinished, ev)
}

func (k *connKernel) toolEvent(topic string, ev control.ToolEvent) {
	n := len(`{"event":"","app":"","call_id":"","outcome":"outcome_unknown","data":}`) + len(topic) + len(ev.App) + len(ev.CallID) + len(ev.Data)
	if ev.Error != nil {
		n += len(`,"error":{"code":"","message":""}`) + len(ev.Error.Code) + len(ev.Error.Message)
	}
	// A line of its own: the queue holds it until written.
	line, err := control.AppendToolEvent(make([]byte, 0, n), topic, ev)
	if err != nil {
		// Only an app's data, which the peer checked: a bug, but the
		// kernel's call still ends.
		line, _ = control.AppendToolEvent(nil, topic, control.ToolEvent{App: ev.App, CallID: ev.CallID, Outcome: ev.Outcome,
			Error: &control.Error{Code: control.CodeInternal, Message: fmt.Sprintf("the daemon could not encode the call's result: %v", err)}})
	}
	k.c.event(line)
}

func (t *peerLink) call(_ context.Context, c *Conn, ca control.ToolCallArgs) (any, error) {
	if err := needApp(ca.App); err != nil {
		return nil, err
	}
	// Both the kernel's to say: no confirm must not mean less than host,
	// nor the app be told of a caller that is nobody.
	if ca.Call.Confirm == "" {
		return nil, control.Errorf(control.CodeBadRequest, `args.call.confirm is missing: send "none" (the app runs it at once), "host" (the person approves first) or "app" (the app asks its person)`)
	}
	if ca.Call.Caller == "" {
		return nil, control.Errorf(control.CodeBadRequest, "args.call.caller is missing: name who is calling (1 to 256 bytes), which the app is told")
	}
	ks, err := attached(c)
	if err != nil {
		return nil, err
	}
	return &toolCallStep{ks: ks, args: ca, data: control.ToolCallData{CallID: ca.Call.CallID, Accepted: true}}, nil
}

// toolCallStep is tool.call's answerAt: the app's peer, owner of the
// call's state, queues "accepted" in the step accepting it, before its
// first event.
type toolCallStep struct {
	ks   *peer.KernelSession
	args control.ToolCallArgs
	data control.ToolCallData
}

func (s *toolCallStep) at(queue func(any)) error {
	return s.ks.ToolCall(s.args.App, s.args.Call, func() { queue(&s.data) })
}

func (t *peerLink) cancel(_ context.Context, c *Conn, args control.CallArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	ks, err := attached(c)
	if err != nil {
		return nil, err
	}
	return struct{}{}, ks.ToolCancel(args.App, args.CallID)
}

func (t *peerLink) contextOwner(_ context.Context, _ *Conn, args control.ContextArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	return t.m.ContextOwner(args.App, args.ContextID)
}

func (t *peerLink) contextList(_ context.Context, _ *Conn, args control.AppArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	return control.ContextsData{Contexts: t.m.Contexts(args.App)}, nil
}

func (t *peerLink) linkHas(_ context.Context, _ *Conn, args control.AppArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	return control.LinkData{Connected: t.m.HasLink(args.App)}, nil
}

func (t *peerLink) accountClose(_ context.Context, _ *Conn, args control.AccountArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	if args.Account == "" {
		return nil, control.Errorf(control.CodeBadRequest, "args.account is missing: the account to close")
	}
	return control.AccountData{Closed: t.m.CloseAccount(args.App, args.Account)}, nil
}

func (t *peerLink) rules(_ context.Context, _ *Conn, args control.RulesArgs) (any, error) {
	var rules []policy.Rule
	var err error
	switch args.Action {
	case "", "list":
		if args.Tool != "" {
			return nil, control.Errorf(control.CodeBadRequest, "args.tool is for a revoke: a list takes args.app only")
		}
		rules, err = t.m.Rules(args.App)
	case "revoke":
		if args.App == "" {
			return nil, control.Errorf(control.CodeBadRequest, "args.app is missing: a revoke needs the app (and args.tool, or every rule of the app goes)")
		}
		rules, err = t.m.RevokeRules(args.App, args.Tool)
	default:
		return nil, control.Errorf(control.CodeBadRequest, "args.action is %q: use \"list\" or \"revoke\"", args.Action)
	}
	if err != nil {
		return nil, fmt.Errorf("rules %s: %w", args.Action, err)
	}
	data := control.RulesData{Rules: make([]control.Rule, 0, len(rules))}
	for _, r := range rules {
		data.Rules = append(data.Rules, control.Rule{App: r.App, Tool: r.Tool, Decision: string(r.Decision), At: r.At})
	}
	return data, nil
}

func (t *peerLink) audit(_ context.Context, _ *Conn, args control.AuditArgs) (any, error) {
	if args.Limit < 0 {
		return nil, control.Errorf(control.CodeBadRequest, "args.limit must be positive (or absent for the last %d)", defaultAuditLimit)
	}
	entries, err := t.m.Audit(args.App, cmp.Or(args.Limit, defaultAuditLimit))
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return control.AuditData{Entries: nonNil(entries)}, nil
}
