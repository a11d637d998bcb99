package daemon

import (
	"context"
	"fmt"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// The tool-call ops of the control socket (docs/control.md), a thin adapter over
// the peer package's relay seams. Their names and wire types are in
// package control; the peer and policy values are converted to those
// types here, so that the wire has one definition.

const defaultAuditLimit = 100

// registerToolOps serves the tool-call ops. tool.call and tool.cancel
// need the connection to be the attached kernel (kernel.attach), since
// the calls' events go to the kernel's connection (connKernel).
func (t *peerLink) registerToolOps(s *Server) {
	// The kernel's ops take effect in the order it sent them (a tool.call
	// then its tool.cancel); none of them waits on the disk.
	s.handleOrdered(control.OpToolCall, withArgs(t.call))
	s.handleOrdered(control.OpToolCancel, withArgs(t.cancel))
	s.handleOrdered(control.OpContextOwner, withArgs(t.contextOwner))
	s.handleOrdered(control.OpContextList, withArgs(t.contextList))
	s.handleOrdered(control.OpLinkHas, withArgs(t.linkHas))
	s.handleOrdered(control.OpAccountClose, withArgs(t.accountClose))
	s.handle(control.OpRules, withArgs(t.rules))
	s.handle(control.OpAudit, withArgs(t.audit))
}

// connKernel is the tool relay too (peer.AttachKernel installs a Kernel
// that is a ToolRelay): the outcomes of tool calls, including those kept
// while no kernel was attached, arrive on the kernel's connection as
// tool.acknowledged and tool.finished events. These methods run with the
// relay and (mostly) an app's peer locked (peer/doc.go, rule 6): they
// never block. Every call makes two events, so they are encoded by
// appends (control.AppendToolEvent), not by json.Marshal.
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
	// A line of its own: the connection's queue holds it until written.
	line, err := control.AppendToolEvent(make([]byte, 0, n), topic, ev)
	if err != nil {
		// Only data an app sent that did not encode: the peer link
		// checked it, so this is a bug; the kernel's call still ends.
		line, _ = control.AppendToolEvent(nil, topic, control.ToolEvent{App: ev.App, CallID: ev.CallID, Outcome: ev.Outcome,
			Error: &control.Error{Code: control.CodeInternal, Message: fmt.Sprintf("the daemon could not encode the call's result: %v", err)}})
	}
	k.c.event(line)
}

func (t *peerLink) call(_ context.Context, c *Conn, ca control.ToolCallArgs) (any, error) {
	if err := needApp(ca.App); err != nil {
		return nil, err
	}
	// Both are the kernel's to say: a missing confirm must never mean
	// less confirmation than host, and the app must not be told of a
	// caller that is nobody.
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

// toolCallStep is tool.call's answerAt. "accepted" is queued by the peer
// in the step that accepts the call, before its first event: the call's
// state is the app's peer's, not this connection's, so that step is the
// peer's.
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
	limit := args.Limit
	if limit == 0 {
		limit = defaultAuditLimit
	}
	entries, err := t.m.Audit(args.App, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if entries == nil {
		entries = []policy.AuditEntry{}
	}
	return control.AuditData{Entries: entries}, nil
}
