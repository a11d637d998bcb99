package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"octosup/control"
)

// cancelWait bounds how long an interrupted call waits for its outcome
// after octosupctl cancelled it.
const cancelWait = 5 * time.Second

// acceptWait bounds the wait for the daemon's answer to tool.call, which
// it gives at once.
const acceptWait = 10 * time.Second

func (c *cli) callCommand() *cobra.Command {
	var risk, confirm, contextID, account, caller string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "call APP TOOL JSON",
		Short: "Call an app's tool as the agent kernel would, and print its outcome",
		Long: `Call an app's tool as the agent kernel would, and print its outcome.

octosupctl attaches as the kernel for this one call (so no other kernel may
be attached), makes the call in one of the app's open contexts and prints
"acknowledged" and then the outcome: a failed one is the error, on stderr
(--json has it on stdout too). With --confirm host the daemon asks the
person first (answer with octosupctl approvals / approve). Ctrl-C cancels
the call. Exit 0 when the tool succeeded, 1 otherwise.`,
		Example: `  octosupctl call notes notes.search '{"query": "milk"}'
  octosupctl call notes notes.append '{"text": "buy milk"}' --risk write --confirm app`,
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			app, tool := args[0], args[1]
			if !json.Valid([]byte(args[2])) || !strings.HasPrefix(strings.TrimSpace(args[2]), "{") {
				return &exitError{code: exitUsage, err: fmt.Errorf("call: the tool's args must be one JSON object, like '{\"query\": \"milk\"}'")}
			}
			if timeout < time.Millisecond {
				return &exitError{code: exitUsage, err: fmt.Errorf("call: --timeout must be at least 1ms")}
			}
			return c.call(cmd.Context(), app, control.ToolCall{
				CallID: fmt.Sprintf("octosupctl-%d", time.Now().UnixNano()), Name: tool,
				Args: json.RawMessage(args[2]), Risk: risk, Confirm: confirm,
				TimeoutMS: timeout.Milliseconds(), ContextID: contextID, Caller: caller,
			}, account)
		},
	}
	f := cmd.Flags()
	f.StringVar(&risk, "risk", control.RiskRead, "read, write or destructive (anything else counts as destructive)")
	f.StringVar(&confirm, "confirm", control.ConfirmNone, "none, host (the person approves first) or app (the app asks its person)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "the call's deadline")
	f.StringVar(&contextID, "context", "", "the app context to call in (default: the app's first open context)")
	f.StringVar(&account, "account", "", "pick the app's first open context with this account")
	f.StringVar(&caller, "caller", "octosupctl", "who the app is told is calling")
	return cmd
}

// call makes one tool call as the kernel: attach, pick a context, submit
// the call, then print its events until its outcome.
func (c *cli) call(ctx context.Context, app string, kc control.ToolCall, account string) error {
	what := "call " + app + " " + kc.Name
	conn, err := c.client().Connect(ctx)
	if err != nil {
		return opError(what, err)
	}
	mine, stopReading := callEvents(conn, app, kc.CallID)
	defer func() { conn.Close(); stopReading() }()
	if err := attachKernel(ctx, conn); err != nil {
		var cerr *control.Error
		if errors.As(err, &cerr) && cerr.Code == control.CodeKernelAttached {
			return &exitError{code: exitFailed, err: fmt.Errorf("%s: another agent kernel is attached; octosupctl call needs to be the kernel for its call", what)}
		}
		return opError(what, err)
	}
	if kc.ContextID == "" {
		if kc.ContextID, err = pickContext(ctx, conn, app, account); err != nil {
			return opError(what, err)
		}
	}
	// The answer is read even when the person interrupts meanwhile: a
	// call the daemon accepted is then cancelled below, never abandoned.
	var accepted control.ToolCallData
	actx, cancelAccept := context.WithTimeout(context.WithoutCancel(ctx), acceptWait)
	err = conn.Do(actx, control.OpToolCall, control.ToolCallArgs{App: app, Call: kc}, &accepted)
	cancelAccept()
	if err != nil {
		return opError(what, err)
	}
	c.callEvent("accepted", control.ToolEvent{App: app, CallID: kc.CallID}, kc)
	return c.awaitOutcome(ctx, conn, mine, app, kc)
}

// callEvents reads conn's events from the start and keeps the call's
// own: attaching hands the connection every outcome queued while no
// kernel was attached, which must never hold up the answers. stop waits
// for the reader, once conn is closed.
func callEvents(conn *control.Conn, app, callID string) (mine <-chan control.Event, stop func()) {
	ch := make(chan control.Event, 4) // at most acknowledged and finished
	reader := make(chan struct{})
	go func() {
		defer close(reader)
		defer close(ch)
		for ev := range conn.Events() {
			var te control.ToolEvent
			if ev.Decode(&te) == nil && te.App == app && te.CallID == callID {
				ch <- ev
			}
		}
	}()
	return ch, func() { <-reader }
}

// pickContext is the app's first open context (with account, when
// given).
func pickContext(ctx context.Context, conn *control.Conn, app, account string) (string, error) {
	var data control.ContextsData
	if err := conn.Do(ctx, control.OpContextList, control.AppArgs{App: app}, &data); err != nil {
		return "", err
	}
	for _, cx := range data.Contexts {
		if account == "" || cx.Account == account {
			return cx.ContextID, nil
		}
	}
	if account != "" {
		return "", fmt.Errorf("it has no open context with account %q", account)
	}
	return "", errors.New("it has no open context (is it running, and did it open a session?)")
}

// awaitOutcome prints the call's events until its outcome; an interrupt
// cancels the call and waits (bounded) for the outcome the daemon owes.
func (c *cli) awaitOutcome(ctx context.Context, conn *control.Conn, events <-chan control.Event, app string, kc control.ToolCall) error {
	what := "call " + app + " " + kc.Name
	interrupted := false
	var giveUp <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return opError(what, fmt.Errorf("the daemon closed the connection before the call finished: %w", conn.Err()))
			}
			var te control.ToolEvent
			ev.Decode(&te) // the reader decoded it once already
			switch ev.Name {
			case control.EventToolAcknowledged:
				c.callEvent("acknowledged", te, kc)
			case control.EventToolFinished:
				return c.finished(ctx, conn, te, kc, interrupted)
			}
		case <-done:
			done, interrupted = nil, true
			cctx, cancel := context.WithTimeout(context.Background(), cancelWait)
			err := conn.Do(cctx, control.OpToolCancel, control.CallArgs{App: app, CallID: kc.CallID}, nil)
			cancel()
			if err != nil {
				return opError(what+": cancel", err)
			}
			giveUp = time.After(cancelWait)
		case <-giveUp:
			return &exitError{code: exitFailed, err: fmt.Errorf("%s: cancelled, and no outcome came within %s", what, cancelWait)}
		}
	}
}

// finished prints a call's outcome. A failed outcome is the error, said
// once, on stderr, with what undoes it when octosupctl knows; --json has
// it on stdout too, as the call's record.
func (c *cli) finished(ctx context.Context, conn *control.Conn, te control.ToolEvent, kc control.ToolCall, interrupted bool) error {
	what := "call " + te.App + " " + kc.Name
	failed := te.Outcome != control.OutcomeOK
	if !failed || c.json {
		c.callEvent("finished", te, kc)
	}
	switch {
	case failed:
		if te.Error != nil {
			e := *te.Error
			e.Message += refusalHint(&e, te.App, kc.Name, func() bool { return deniedByRule(ctx, conn, te.App, kc.Name) })
			te.Error = &e
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: %s", what, outcomeText(te))}
	case interrupted:
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: interrupted, after the tool had succeeded", what)}
	}
	return nil
}

// refusalHint is the command that undoes a refusal, for a person: the
// daemon says what happened in protocol terms, octosupctl what to type.
// ruleDenies reports whether a standing rule answered deny (asked only
// of a declined call). A message that names a command already (an older
// daemon's) gets none.
func refusalHint(e *control.Error, app, tool string, ruleDenies func() bool) string {
	if strings.Contains(e.Message, "octosupctl ") {
		return ""
	}
	switch e.Code {
	case control.CodeConsentDenied:
		return fmt.Sprintf("; after `octosupctl consent revoke %s`, the app's next request asks again", app)
	case control.CodeDeclined:
		if tool != "" && ruleDenies() {
			return fmt.Sprintf("; `octosupctl rules revoke %s %s` asks again", app, tool)
		}
	}
	return ""
}

// deniedByRule reports whether a standing rule denies app's tool.
func deniedByRule(ctx context.Context, conn *control.Conn, app, tool string) bool {
	var data control.RulesData
	if err := conn.Do(ctx, control.OpRules, control.RulesArgs{Action: "list", App: app}, &data); err != nil {
		return false
	}
	for _, r := range data.Rules {
		if r.Tool == tool && r.Decision == "deny" {
			return true
		}
	}
	return false
}

// attachWait bounds how long call waits for the kernel slot: the daemon
// detaches a kernel once it noticed its connection closed, so a call
// right after another one may find the slot still taken for a moment.
const attachWait = 2 * time.Second

// attachKernel makes conn the kernel, retrying (bounded) while another
// kernel holds the slot: no event says when it is let go.
func attachKernel(ctx context.Context, conn *control.Conn) error {
	deadline := time.Now().Add(attachWait)
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		err := conn.Do(ctx, control.OpKernelAttach, struct{}{}, nil)
		var cerr *control.Error
		if err == nil || !errors.As(err, &cerr) || cerr.Code != control.CodeKernelAttached || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// callEvent prints one step of a call.
func (c *cli) callEvent(step string, te control.ToolEvent, kc control.ToolCall) {
	if c.json {
		c.printJSONLine(struct {
			Step string `json:"step"`
			control.ToolEvent
		}{step, te})
		return
	}
	switch step {
	case "accepted":
		c.say("%s: accepted (call %s)", kc.Name, kc.CallID)
	case "acknowledged":
		c.say("%s: acknowledged", kc.Name)
		if kc.Confirm == control.ConfirmHost {
			c.say("the person is asked first (unless a standing rule answers): octosupctl approvals, then octosupctl approve ID allow|deny [--remember]")
		}
	default:
		c.say("%s: %s", kc.Name, outcomeText(te))
	}
}

func outcomeText(te control.ToolEvent) string {
	s := te.Outcome
	if te.Error != nil {
		s += fmt.Sprintf(" (%s: %s)", te.Error.Code, te.Error.Message)
	}
	if len(te.Data) > 0 {
		s += " " + string(te.Data)
	}
	return s
}

func (c *cli) rulesCommand() *cobra.Command {
	list := func(cmd *cobra.Command, args []string) error {
		ra := control.RulesArgs{Action: "list"}
		if len(args) == 1 {
			ra.App = args[0]
		}
		var data control.RulesData
		if err := c.client().Do(cmd.Context(), control.OpRules, ra, &data); err != nil {
			return opError("rules", err)
		}
		if c.json {
			return c.printJSON(data)
		}
		if len(data.Rules) == 0 {
			c.say("no standing rules (approve a tool confirmation with --remember to make one)")
			return nil
		}
		t := c.table("APP", "TOOL", "DECISION", "SINCE")
		for _, r := range data.Rules {
			t.row(r.App, r.Tool, r.Decision, r.At.Local().Format(time.DateTime))
		}
		return t.flush()
	}
	cmd := &cobra.Command{
		Use:   "rules [APP]",
		Short: "List the standing tool rules (approve --remember); rules revoke forgets them",
		Args:  cobra.MaximumNArgs(1),
		RunE:  list,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list [APP]",
		Short: "List the standing tool rules, of every app or of APP",
		Args:  cobra.MaximumNArgs(1),
		RunE:  list,
	}, &cobra.Command{
		Use:   "revoke APP [TOOL]",
		Short: "Forget APP's standing rule for TOOL (every rule of APP without TOOL): the person is asked again",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ra := control.RulesArgs{Action: "revoke", App: args[0]}
			if len(args) == 2 {
				ra.Tool = args[1]
			}
			var data control.RulesData
			if err := c.client().Do(cmd.Context(), control.OpRules, ra, &data); err != nil {
				return opError("rules revoke "+args[0], err)
			}
			if c.json {
				return c.printJSON(data)
			}
			if len(data.Rules) == 0 {
				return &exitError{code: exitFailed, err: fmt.Errorf("rules revoke %s: no such standing rule", strings.Join(args, " "))}
			}
			for _, r := range data.Rules {
				c.say("revoked: %s %s (%s)", r.App, r.Tool, r.Decision)
			}
			return nil
		},
	})
	return cmd
}

func (c *cli) auditCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "audit [APP]",
		Short: "Print the last tool calls into apps: tool, risk, who decided, outcome, duration",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			aa := control.AuditArgs{Limit: limit}
			if len(args) == 1 {
				aa.App = args[0]
			}
			var data control.AuditData
			if err := c.client().Do(cmd.Context(), control.OpAudit, aa, &data); err != nil {
				return opError("audit", err)
			}
			if c.json {
				return c.printJSON(data)
			}
			if len(data.Entries) == 0 {
				c.say("no tool calls recorded")
				return nil
			}
			t := c.table("TIME", "APP", "TOOL", "RISK", "DECISION", "OUTCOME", "DURATION")
			for _, e := range data.Entries {
				decision := e.Decision
				if e.Approved != "" {
					decision += " " + e.Approved
				}
				outcome := e.Outcome
				if e.Error != "" {
					outcome += " " + e.Error
				}
				t.row(e.Started.Local().Format(time.DateTime), e.App, e.Tool, e.Risk,
					decision, outcome, time.Duration(e.DurationMS*float64(time.Millisecond)).Round(time.Microsecond).String())
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVarP(&limit, "lines", "n", 100, "how many of the last calls")
	return cmd
}
