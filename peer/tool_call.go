package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// callState is where a tool call is; only call.move changes it. The
// terminal states (finished, cancelled, timedOut) follow its one outcome:
// nothing about it is sent or accepted after.
type callState int

const (
	callAccepted     callState = iota // accepted: its sheet or rule not yet decided
	callAwaitingHost                  // a host sheet is open for it
	callDelivered                     // its tool_call was written to the app
	callAwaitingApp                   // the app asks its person (awaiting_confirmation)
	callFinished                      // a result, or the host's deny
	callCancelled                     // withdrawn: ToolCancel, context or account closed, app gone
	callTimedOut                      // its deadline passed
)

func (s callState) String() string {
	return [...]string{"accepted", "awaiting_host", "delivered", "awaiting_app", "finished", "cancelled", "timed_out"}[s]
}

func (s callState) terminal() bool { return s >= callFinished }

var callMoves = [callTimedOut + 1][]callState{
	callAccepted:     {callAwaitingHost, callDelivered, callFinished, callCancelled, callTimedOut}, // awaitingHost: confirm host, no standing rule
	callAwaitingHost: {callDelivered, callFinished, callCancelled, callTimedOut},                   // delivered: allowed; finished: declined
	callDelivered:    {callAwaitingApp, callFinished, callCancelled, callTimedOut},                 // awaitingApp: confirm app, awaiting_confirmation
	callAwaitingApp:  {callFinished, callCancelled, callTimedOut},
}

// call is one tool call from acceptance to its outcome.
type call struct {
	link    *link
	ctx     *appContext
	id      string
	name    string
	args    json.RawMessage
	risk    string // normalized: read, write or destructive
	confirm string // normalized: none, host or app
	caller  string

	state    callState
	acked    bool
	started  time.Time // monotonic: durations and the deadline
	at       time.Time // Config.Now at acceptance, for the audit
	deadline time.Time
	timer    *time.Timer
	approval *approval // the open host sheet, in awaitingHost
	decision string    // audit: none, rule, sheet
	approved policy.Decision
}

// move changes c's state along callMoves; an illegal move is a bug,
// logged and not obeyed.
func (c *call) move(to callState) bool {
	if !slices.Contains(callMoves[c.state], to) {
		c.link.m.log.Error("illegal tool call state move", zap.String("app", c.link.appID),
			zap.String("call_id", c.id), zap.Stringer("from", c.state), zap.Stringer("to", to))
		return false
	}
	c.state = to
	return true
}

// sent reports whether the app was sent the call (and may act on it).
func (c *call) sent() bool { return c.state == callDelivered || c.state == callAwaitingApp }

// failResult is the outcome of a call ended without the app's result:
// OutcomeUnknown when the app was sent it and its risk is not read, else
// Error{code}.
func failResult(c *call, code, msg string) Result {
	if c.sent() && c.risk != control.RiskRead {
		return Result{Outcome: OutcomeUnknown, Error: &Error{Code: code, Message: msg}}
	}
	return Result{Outcome: OutcomeError, Error: &Error{Code: code, Message: msg}}
}

func normalizeRisk(r string) string {
	switch r {
	case control.RiskRead, control.RiskWrite, control.RiskDestructive:
		return r
	}
	return control.RiskDestructive // fails safe: missing or unknown
}

// checkCall checks a call on its own, returning its args compacted and
// its confirm normalized.
func (m *Manager) checkCall(kc control.ToolCall) (json.RawMessage, string, error) {
	if !frame.ValidID(kc.CallID) {
		return nil, "", refuse(ErrInvalid, "call_id must be 1 to 128 printable ASCII characters")
	}
	if kc.Name == "" || len(kc.Name) > 128 {
		return nil, "", refuse(ErrInvalid, "name must be a tool name of 1 to 128 bytes")
	}
	if !frame.ValidID(kc.ContextID) {
		return nil, "", refuse(ErrInvalid, "context_id must be 1 to 128 printable ASCII characters")
	}
	if len(kc.Caller) > 256 {
		return nil, "", refuse(ErrInvalid, "caller over 256 bytes")
	}
	max := m.cfg.MaxToolTimeout
	if kc.TimeoutMS < 1 || kc.TimeoutMS > max.Milliseconds() {
		return nil, "", refuse(ErrInvalid, "timeout_ms must be 1 to %d (the daemon's maximum), got %d", max.Milliseconds(), kc.TimeoutMS)
	}
	confirm := kc.Confirm
	switch confirm {
	case "":
		confirm = control.ConfirmNone
	case control.ConfirmNone, control.ConfirmHost, control.ConfirmApp:
	default:
		return nil, "", refuse(ErrInvalid, "confirm must be %q, %q or %q, got %q", control.ConfirmNone, control.ConfirmHost, control.ConfirmApp, kc.Confirm)
	}
	args := kc.Args
	if args == nil {
		args = json.RawMessage("{}")
	}
	args, err := compactFrameValue("args", args)
	if err != nil {
		return nil, "", err
	}
	if args[0] != '{' {
		return nil, "", refuse(ErrInvalid, "args must be a JSON object")
	}
	return args, confirm, nil
}

// acceptCall checks a call against the app's state and records it
// accepted; place sends it on in the same step.
func (p *peer) acceptCall(kc control.ToolCall, args json.RawMessage, confirm string) (*call, error) {
	l := p.link
	if l == nil {
		return nil, ErrNotConnected
	}
	if l.calls[kc.CallID] != nil {
		return nil, refuse(ErrDuplicate, "call_id %q is outstanding: give each call its own", kc.CallID)
	}
	if p.recentCalls.has(kc.CallID) {
		return nil, refuse(ErrDuplicate, "call_id %q finished recently: give each call its own", kc.CallID)
	}
	if n := len(l.calls); n >= p.m.cfg.MaxCalls {
		return nil, refuse(ErrLimit, "the app has %d tool calls outstanding, the most it may: wait for an outcome (or cancel one)", n)
	}
	if !slices.Contains(p.app.Grants.Tools, kc.Name) {
		return nil, refuse(ErrDeclined, "%s is not in the app's grants.tools: add it to the manifest entry to let the app receive it", kc.Name)
	}
	ctx := l.contexts[kc.ContextID]
	if ctx == nil {
		return nil, ErrUnknownContext
	}
	if !slices.Contains(p.app.Sandbox.Accounts, ctx.account) {
		return nil, refuse(ErrDeclined, "account %q of context %s is not in the app's sandbox.accounts", ctx.account, ctx.id)
	}
	now := time.Now()
	c := &call{
		link: l, ctx: ctx, id: kc.CallID, name: kc.Name, args: args,
		risk: normalizeRisk(kc.Risk), confirm: confirm, caller: kc.Caller,
		started: now, at: p.m.cfg.Now(), deadline: now.Add(time.Duration(kc.TimeoutMS) * time.Millisecond),
		decision: policy.AuditDecisionNone,
	}
	c.timer = p.after(c.deadline.Sub(now), func() { p.callTimeout(c) })
	l.calls[c.id] = c
	return c, nil
}

func (p *peer) place(c *call) {
	c.ctx.calls[c.id] = c
	switch c.confirm {
	case control.ConfirmHost:
		p.ack(c)
		p.confirmHost(c)
	case control.ConfirmApp:
		p.deliver(c) // acknowledged by the app's awaiting_confirmation
	default:
		// Acknowledged when written, but posted first so the relay has it
		// before the app reads the call (a failed write ends the call,
		// acknowledged anyway).
		p.ack(c)
		p.deliver(c)
	}
}

// confirmHost decides a host-confirmed call by its standing rule, or
// raises its sheet.
func (p *peer) confirmHost(c *call) {
	m := p.m
	switch rule, ok := p.choices.rules[c.name]; {
	case ok && rule == policy.Allow:
		c.decision, c.approved = policy.AuditDecisionRule, policy.Allow
		p.deliver(c)
	case ok:
		c.decision, c.approved = policy.AuditDecisionRule, policy.Deny
		p.endCall(c, callFinished, Result{Outcome: OutcomeError, Error: frame.Errorf(CodeDeclined,
			"a standing rule of app %s denies %s: revoking the rule (control op rules, action revoke) has the next call ask the person", p.id, c.name)}, "")
	case p.sheets >= m.cfg.MaxPendingApprovals:
		// More sheets than a person reads: the call does not wait.
		p.endCall(c, callFinished, Result{Outcome: OutcomeError, Error: frame.Errorf(CodeQuotaExceeded,
			"app %s has %d host confirmations waiting for the person, the most it may: %s was not asked for", p.id, p.sheets, c.name)}, "")
	default:
		c.decision = policy.AuditDecisionSheet
		c.move(callAwaitingHost)
		p.askHost(c)
	}
}

func (p *peer) deliver(c *call) {
	ms := max(1, int64((time.Until(c.deadline)+time.Millisecond-1)/time.Millisecond))
	f := &frame.ToolCall{
		CallID: c.id, Name: c.name, Args: c.args, Risk: c.risk,
		ConfirmRequired: c.confirm == control.ConfirmApp, TimeoutMS: ms,
		Account: c.ctx.account, ContextID: c.ctx.id, Client: c.ctx.client, Caller: c.caller,
	}
	// The only call out is written now, saving the writer's wake-up; with
	// more out, the writer gathers them.
	switch err := c.link.send(f, len(c.link.calls) == 1, true); {
	case errors.Is(err, ErrQueueFull):
		p.endCall(c, callCancelled, Result{Outcome: OutcomeError, Error: frame.Errorf(CodeQueueFull, "%v", err)}, "")
	case err != nil:
		p.endCall(c, callCancelled, failResult(c, frame.CodeCancelled, "the app's hub closed before the call could be written"), "")
	default:
		c.move(callDelivered)
	}
}

func (p *peer) ack(c *call) {
	if c.acked {
		return
	}
	c.acked = true
	p.m.relay.note(relayNote{app: p.id, callID: c.id})
}

// endCall gives a call its one outcome. cancel, when not "", is the
// reason of a tool_cancel to the app if it was sent the call.
func (p *peer) endCall(c *call, to callState, r Result, cancel string) {
	wasSent := c.sent()
	if !c.move(to) {
		return
	}
	m := p.m
	m.stop(c.timer)
	c.timer = nil
	l := c.link
	if a := c.approval; a != nil {
		c.approval = nil
		state := ApprovalCancelled
		if to == callTimedOut {
			state = ApprovalExpired
		}
		p.settle(a, state)
	}
	delete(l.calls, c.id)
	delete(c.ctx.calls, c.id)
	p.recentCalls.add(c.id, m.cfg.DuplicateWindow)
	// Audited before the outcome is handed over: who sees the outcome and
	// then asks Audit (which flushes) finds the call.
	e := policy.AuditEntry{
		App: p.id, Tool: c.name, CallID: c.id, Risk: c.risk, Confirm: c.confirm,
		Decision: c.decision, Approved: string(c.approved), Outcome: r.Outcome.String(),
		End:     to.String(), // finished, cancelled, timed_out
		Account: c.ctx.account, ContextID: c.ctx.id, Caller: c.caller,
		Started: c.at.UTC(), DurationMS: float64(time.Since(c.started).Microseconds()) / 1000,
	}
	if r.Error != nil {
		e.Error = r.Error.Code
	}
	m.audit.add(e)
	p.ack(c)
	m.relay.note(relayNote{app: p.id, callID: c.id, finished: true, r: r})
	// After the outcome: the relay has had what came before anything the
	// app reads.
	if cancel != "" && wasSent {
		l.sendFrame(&frame.ToolCancel{CallID: c.id, Reason: cancel})
	}
}

func (p *peer) callTimeout(c *call) {
	if c.state.terminal() {
		return // ended while its timer fired
	}
	why := "the call did not reach the app within its timeout"
	if c.sent() {
		why = "the app did not answer the call within its timeout"
	} else if c.state == callAwaitingHost {
		why = "nobody approved the call within its timeout"
	}
	p.m.log.Info("tool call timed out", zap.String("app", p.id), zap.String("call_id", c.id), zap.Stringer("state", c.state))
	p.endCall(c, callTimedOut, failResult(c, frame.CodeTimeout, why), "timeout")
}

// onToolResult takes an app's tool_result; one that does not fit the
// call's state is logged and ignored. sent: it answered an awaited call.
func (p *peer) onToolResult(l *link, f *frame.ToolResult) (sent bool) {
	if p.link != l || l.isShut() {
		return true
	}
	c := l.calls[f.CallID]
	if c == nil || !c.sent() {
		why := "a call this app was never sent"
		if p.recentCalls.has(f.CallID) {
			why = "a call that already has its outcome"
		}
		p.m.log.Info("tool_result ignored: "+why, zap.String("app", p.id), zap.String("call_id", f.CallID))
		return false
	}
	if f.AwaitingConfirmation {
		if c.confirm != control.ConfirmApp || c.state == callAwaitingApp {
			p.m.log.Info("awaiting_confirmation ignored: the call did not ask for it, or it came twice",
				zap.String("app", p.id), zap.String("call_id", c.id))
			return false
		}
		c.move(callAwaitingApp)
		p.ack(c)
		return true
	}
	if c.confirm == control.ConfirmApp && c.state == callDelivered {
		p.m.log.Warn("final tool_result without the awaiting_confirmation the call asked for",
			zap.String("app", p.id), zap.String("call_id", c.id))
		p.endCall(c, callFinished, Result{Outcome: OutcomeError, Error: frame.Errorf(frame.CodeConfirmationSkipped,
			"app %s answered %s without asking its person first (confirm_required)", p.id, c.name)}, frame.CodeConfirmationSkipped)
		return true
	}
	r := Result{Outcome: OutcomeOK, Data: f.Data}
	if !f.OK {
		r = Result{Outcome: OutcomeError, Error: f.Error}
	}
	if n := resultLen(r); n > relayRoom {
		r = Result{Outcome: OutcomeError, Error: frame.Errorf(frame.CodeQuotaExceeded,
			"app %s answered %s with a result that takes %d bytes on the control socket (each <, > and & written as \\u003c), past the %d a relayed value may", p.id, c.name, n, relayRoom)}
		p.m.log.Warn("tool result too large to relay", zap.String("app", p.id), zap.String("call_id", c.id), zap.Int("bytes", n))
	}
	p.endCall(c, callFinished, r, "")
	return true
}

// askHost raises a call's host sheet, which expires with the call.
func (p *peer) askHost(c *call) {
	a := &approval{
		Approval: Approval{
			ApprovalID: p.m.approvalID(),
			App:        p.id,
			Kind:       KindTool,
			State:      ApprovalPending,
			CallID:     c.id,
			Tool:       c.name,
			Risk:       c.risk,
			Args:       summarize(c.args),
			Account:    c.ctx.account,
			Caller:     c.caller,
			Created:    c.at.UTC(),
			Expires:    c.at.Add(c.deadline.Sub(c.started)).UTC(),
		},
		call: c,
	}
	c.approval = a
	p.sheets++
	p.m.log.Info("asking the person to confirm a tool call", zap.String("app", a.App), zap.String("tool", a.Tool),
		zap.String("call_id", c.id), zap.String("approval_id", a.ApprovalID))
	p.raise(a)
}

func summarize(args json.RawMessage) string {
	if len(args) <= maxArgsSummary {
		return string(args)
	}
	cut := maxArgsSummary
	for cut > 0 && args[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return string(bytes.Clone(args[:cut])) + "…"
}

// answerTool settles a host sheet: allow delivers the call, deny ends it
// Error{declined}. With remember (the rule persisted by Approve) it also
// answers the app's other open sheets for the tool.
func (p *peer) answerTool(a *approval, d policy.Decision, remember bool) {
	if p.approvals[a.ApprovalID] == a {
		// (Its call may have timed out while the rule was written.)
		p.settleTool(a, d, policy.AuditDecisionSheet)
	}
	if remember {
		var others []*approval
		for _, o := range p.approvals {
			if o.Kind == KindTool && o.Tool == a.Tool {
				others = append(others, o)
			}
		}
		slices.SortFunc(others, func(x, y *approval) int { return strings.Compare(x.CallID, y.CallID) })
		for _, o := range others {
			p.settleTool(o, d, policy.AuditDecisionRule)
		}
	}
}

func (p *peer) settleTool(a *approval, d policy.Decision, decision string) {
	c := a.call
	c.approval = nil
	p.settle(a, answeredState(d))
	if c.state != callAwaitingHost {
		return
	}
	c.decision, c.approved = decision, d
	if d == policy.Allow {
		p.deliver(c)
		return
	}
	p.endCall(c, callFinished, Result{Outcome: OutcomeError, Error: frame.Errorf(CodeDeclined,
		"the person declined %s for app %s", c.name, p.id)}, "")
}

// resultLen bounds the bytes r's data and error take in the kernel's
// tool.finished line (for relayRoom and the relay's backlog).
func resultLen(r Result) int {
	n := frame.RelayedLen(r.Data)
	if r.Error != nil {
		b, _ := json.Marshal(r.Error)
		n += len(b)
	}
	return n
}
