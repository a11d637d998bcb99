package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// Each test here drives a real link (a socketpair, the app's end read and
// written by the test) and checks the exact lines the app saw and the
// exact callbacks the relay saw.

func TestToolCallPlain(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	call := kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone)
	h.call("notes", call)
	tc := a.nextToolCall("c1")
	// Stamped from the daemon's records and the kernel's call.
	if tc.Account != "personal" || tc.ContextID != ctx || tc.Client != "notes" || tc.Caller != "assistant" ||
		tc.Risk != RiskRead || tc.ConfirmRequired || tc.TimeoutMS != 60000 || string(tc.Args) != `{"q":"milk"}` {
		t.Fatalf("tool_call %+v", tc)
	}
	expectRelay(t, relay, "ack notes c1") // acknowledged when written
	if got := h.m.LinkStatus("notes").OutstandingCalls; got != 1 {
		t.Fatalf("outstanding calls %d", got)
	}
	a.ok("c1", `{"matches":[]}`)
	a.expectFrames()
	expectRelay(t, relay, "ack notes c1", `fin notes c1 ok {"matches":[]}`)
	if got := h.m.LinkStatus("notes").OutstandingCalls; got != 0 {
		t.Fatalf("outstanding calls %d", got)
	}
	// An error result is the call's Error outcome, code and message as
	// the app sent them.
	h.call("notes", kc(ctx, "c2", "notes.append", RiskWrite, ConfirmNone))
	a.nextToolCall("c2")
	a.result(&frame.ToolResult{CallID: "c2", Error: &Error{Code: "internal", Message: "disk full"}})
	a.expectFrames()
	ev := relay.WaitFor(4, wait)
	if len(ev) != 4 || ev[3].Finished == nil || *ev[3].Finished.Error != (Error{Code: "internal", Message: "disk full"}) {
		t.Fatalf("relay %v", ev)
	}
}

func TestToolCallExactFrame(t *testing.T) {
	h, _ := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	call := kc(ctx, "c1", "notes.append", RiskWrite, ConfirmApp)
	h.call("notes", call)
	a.expectFrames(toolCallLine("notes", ctx, call, RiskWrite))
}

func TestToolCallRefusals(t *testing.T) {
	h, relay := newToolHarness(t, func(c *Config) { c.MaxToolTimeout = time.Minute })
	a, ctx := h.toolApp(toolEntry("notes"))
	other, otherCtx := h.toolApp(toolEntry("mail"))
	limited := toolEntry("limited")
	limited.Grants.Tools = []string{"notes.search"}
	lim, limCtx := h.toolApp(limited)
	// A context of no account: the app is granted none.
	noAccounts := toolEntry("solo")
	noAccounts.Sandbox.Accounts = nil
	solo, soloCtx := h.toolApp(noAccounts)
	// A finished call and an outstanding one, for the duplicate cases.
	h.call("notes", kc(ctx, "done", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("done")
	a.ok("done", "")
	h.call("notes", kc(ctx, "open", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("open")
	a.expectFrames()
	before := len(relay.WaitFor(3, wait))

	with := func(f func(*KernelToolCall)) KernelToolCall {
		c := kc(ctx, "new", "notes.search", RiskRead, ConfirmNone)
		f(&c)
		return c
	}
	tests := []struct {
		name string
		app  string
		call KernelToolCall
		want error
	}{
		{"timeout 0", "notes", with(func(c *KernelToolCall) { c.TimeoutMS = 0 }), ErrInvalid},
		{"timeout negative", "notes", with(func(c *KernelToolCall) { c.TimeoutMS = -5 }), ErrInvalid},
		{"timeout over max", "notes", with(func(c *KernelToolCall) { c.TimeoutMS = 60001 }), ErrInvalid},
		{"bad call_id", "notes", with(func(c *KernelToolCall) { c.CallID = "a\nb" }), ErrInvalid},
		{"empty call_id", "notes", with(func(c *KernelToolCall) { c.CallID = "" }), ErrInvalid},
		{"no name", "notes", with(func(c *KernelToolCall) { c.Name = "" }), ErrInvalid},
		{"bad confirm", "notes", with(func(c *KernelToolCall) { c.Confirm = "maybe" }), ErrInvalid},
		{"args not object", "notes", with(func(c *KernelToolCall) { c.Args = json.RawMessage(`[1]`) }), ErrInvalid},
		{"args not json", "notes", with(func(c *KernelToolCall) { c.Args = json.RawMessage(`{`) }), ErrInvalid},
		{"no context", "notes", with(func(c *KernelToolCall) { c.ContextID = "" }), ErrInvalid},
		{"not connected", "ghost", with(func(*KernelToolCall) {}), ErrNotConnected},
		{"duplicate outstanding", "notes", with(func(c *KernelToolCall) { c.CallID = "open" }), ErrDuplicate},
		{"duplicate finished", "notes", with(func(c *KernelToolCall) { c.CallID = "done" }), ErrDuplicate},
		{"made-up context", "notes", with(func(c *KernelToolCall) { c.ContextID = "n0nce-99" }), ErrUnknownContext},
		{"other app's context", "notes", with(func(c *KernelToolCall) { c.ContextID = otherCtx }), ErrUnknownContext},
		{"tool not granted", "notes", with(func(c *KernelToolCall) { c.Name = "mail.send" }), ErrDeclined},
		{"tool not granted to this app", "limited", with(func(c *KernelToolCall) { c.Name = "notes.append"; c.ContextID = limCtx }), ErrDeclined},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.m.ToolCall(tt.app, tt.call)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if Code(err) == frame.CodeInternal {
				t.Fatalf("no code for %v", err)
			}
		})
	}
	// A context whose account is not granted: declined. (A reload that
	// takes an account away closes its contexts: TestReloadNarrowsLiveLink.)
	if err := h.m.ToolCall("solo", kc(soloCtx, "new", "notes.search", RiskRead, ConfirmNone)); !errors.Is(err, ErrDeclined) || !strings.Contains(err.Error(), "sandbox.accounts") {
		t.Fatalf("account outside sandbox.accounts: %v", err)
	}
	// Nothing reached any app or the relay.
	a.expectFrames()
	other.expectFrames()
	lim.expectFrames()
	solo.expectFrames()
	if got := relay.Events(); len(got) != before {
		t.Fatalf("refusals reached the relay: %v", got[before:])
	}
}

func TestToolSecondResultIgnored(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c1")
	a.ok("c1", `1`)
	a.ok("c1", `2`)
	a.result(&frame.ToolResult{CallID: "c1", Error: &Error{Code: "internal", Message: "late"}})
	a.awaiting("c1")
	a.expectFrames()
	expectRelay(t, relay, "ack notes c1", "fin notes c1 ok 1")
	if n := h.logs.FilterMessageSnippet("already has its outcome").Len(); n != 3 {
		t.Fatalf("%d late results logged, want 3", n)
	}
}

func TestToolResultForUnknownCall(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	b, bctx := h.toolApp(toolEntry("mail"))
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c1")
	// Another app answers notes's call id, and a made-up one.
	b.ok("c1", `"stolen"`)
	b.ok("nope", "")
	b.expectFrames()
	// A call not sent yet (awaiting its host sheet) cannot be answered.
	h.call("mail", kc(bctx, "h1", "notes.wipe", RiskDestructive, ConfirmHost))
	ap := h.events.nextApproval(t)
	b.ok("h1", "")
	b.expectFrames()
	a.ok("c1", `"mine"`)
	a.expectFrames()
	expectRelay(t, relay, "ack notes c1", "ack mail h1", `fin notes c1 ok "mine"`)
	if n := h.logs.FilterMessageSnippet("never sent").Len(); n != 3 {
		t.Fatalf("%d ignored results logged, want 3", n)
	}
	if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); err != nil {
		t.Fatal(err)
	}
	expectRelay(t, relay, "ack notes c1", "ack mail h1", `fin notes c1 ok "mine"`, "fin mail h1 error declined")
}

func TestToolCancel(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "w", "notes.append", RiskWrite, ConfirmNone))
	h.call("notes", kc(ctx, "r", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("w")
	a.nextToolCall("r")
	for _, id := range []string{"w", "r"} {
		if err := h.m.ToolCancel("notes", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.m.ToolCancel("notes", "w"); !errors.Is(err, ErrUnknownCall) {
		t.Fatalf("second cancel: %v", err)
	}
	if err := h.m.ToolCancel("notes", "never"); !errors.Is(err, ErrUnknownCall) {
		t.Fatalf("cancel of an unknown call: %v", err)
	}
	// The app's late results change nothing, and nothing more is written
	// for either call.
	a.ok("w", "")
	a.awaiting("r")
	a.expectFrames(cancelLine("w", "cancelled"), cancelLine("r", "cancelled"))
	expectRelay(t, relay, "ack notes w", "ack notes r",
		"fin notes w outcome_unknown cancelled", // written and not read-only: it may have happened
		"fin notes r error cancelled")
}

func TestToolConfirmHost(t *testing.T) {
	t.Run("allow", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		call := kc(ctx, "h1", "notes.wipe", RiskDestructive, ConfirmHost)
		h.call("notes", call)
		ap := h.events.nextApproval(t)
		// Acknowledged before the sheet was shown.
		expectRelay(t, relay, "ack notes h1")
		if ap.Kind != KindTool || ap.App != "notes" || ap.Tool != "notes.wipe" || ap.Risk != RiskDestructive ||
			ap.Args != `{"q":"milk"}` || ap.CallID != "h1" || ap.Account != "personal" || ap.State != ApprovalPending {
			t.Fatalf("approval %+v", ap)
		}
		if got := h.m.Approvals(); len(got) != 1 || got[0].ApprovalID != ap.ApprovalID {
			t.Fatalf("approvals %+v", got)
		}
		a.expectFrames() // nothing before the person answers
		if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
			t.Fatal(err)
		}
		if got := h.events.nextApproval(t); got.State != ApprovalAllowed {
			t.Fatalf("settled %+v", got)
		}
		a.nextToolCall("h1")
		a.ok("h1", "")
		a.expectFrames()
		expectRelay(t, relay, "ack notes h1", "fin notes h1 ok")
		if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); !errors.Is(err, ErrUnknownApproval) {
			t.Fatalf("late answer: %v", err)
		}
		if rules, _ := h.m.Rules(""); len(rules) != 0 {
			t.Fatalf("rule persisted without remember: %v", rules)
		}
	})
	t.Run("deny", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		h.call("notes", kc(ctx, "h1", "notes.wipe", RiskDestructive, ConfirmHost))
		ap := h.events.nextApproval(t)
		if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); err != nil {
			t.Fatal(err)
		}
		a.expectFrames()
		expectRelay(t, relay, "ack notes h1", "fin notes h1 error declined")
	})
	t.Run("remember", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		// Two sheets for the same tool: remembering one answers both.
		h.call("notes", kc(ctx, "h1", "notes.wipe", RiskDestructive, ConfirmHost))
		h.call("notes", kc(ctx, "h2", "notes.wipe", RiskDestructive, ConfirmHost))
		ap := h.events.nextApproval(t)
		h.events.nextApproval(t)
		if err := h.m.Approve(ap.ApprovalID, policy.Allow, true); err != nil {
			t.Fatal(err)
		}
		a.nextToolCall("h1")
		a.nextToolCall("h2")
		// The rule answers the next call: no sheet.
		h.call("notes", kc(ctx, "h3", "notes.wipe", RiskDestructive, ConfirmHost))
		a.nextToolCall("h3")
		for _, id := range []string{"h1", "h2", "h3"} {
			a.ok(id, "")
		}
		a.expectFrames()
		expectRelay(t, relay, "ack notes h1", "ack notes h2", "ack notes h3",
			"fin notes h1 ok", "fin notes h2 ok", "fin notes h3 ok")
		for _, st := range []string{ApprovalAllowed, ApprovalAllowed} {
			if got := h.events.nextApproval(t); got.State != st {
				t.Fatalf("settled %+v", got)
			}
		}
		h.events.noApproval(t)
		rules, err := h.m.Rules("notes")
		if err != nil || len(rules) != 1 || rules[0].Tool != "notes.wipe" || rules[0].Decision != policy.Allow {
			t.Fatalf("rules %v %v", rules, err)
		}
		// A standing deny, then revoking it asks again.
		h.setRule(policy.Rule{App: "notes", Tool: "notes.wipe", Decision: policy.Deny})
		h.call("notes", kc(ctx, "h4", "notes.wipe", RiskDestructive, ConfirmHost))
		expectRelay(t, relay, "ack notes h1", "ack notes h2", "ack notes h3",
			"fin notes h1 ok", "fin notes h2 ok", "fin notes h3 ok", "ack notes h4", "fin notes h4 error declined")
		if gone, err := h.m.RevokeRules("notes", "notes.wipe"); err != nil || len(gone) != 1 {
			t.Fatalf("revoke %v %v", gone, err)
		}
		h.call("notes", kc(ctx, "h5", "notes.wipe", RiskDestructive, ConfirmHost))
		if ap := h.events.nextApproval(t); ap.CallID != "h5" {
			t.Fatalf("approval %+v", ap)
		}
		a.expectFrames()
		audit, err := h.m.Audit("notes", 0)
		if err != nil {
			t.Fatal(err)
		}
		var decisions []string
		for _, e := range audit {
			decisions = append(decisions, e.CallID+":"+e.Decision+":"+e.Approved)
		}
		if got := strings.Join(decisions, " "); got != "h1:sheet:allow h2:rule:allow h3:rule:allow h4:rule:deny" {
			t.Fatalf("audit decisions %s", got)
		}
	})
	t.Run("sheet times out", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		call := kc(ctx, "h1", "notes.wipe", RiskDestructive, ConfirmHost)
		call.TimeoutMS = 30
		h.call("notes", call)
		ap := h.events.nextApproval(t)
		expectRelay(t, relay, "ack notes h1", "fin notes h1 error timeout") // never reached the app
		if got := h.events.nextApproval(t); got.State != ApprovalExpired {
			t.Fatalf("settled %+v", got)
		}
		if err := h.m.Approve(ap.ApprovalID, policy.Allow, true); !errors.Is(err, ErrUnknownApproval) {
			t.Fatalf("late answer: %v", err)
		}
		a.expectFrames()
		if rules, _ := h.m.Rules(""); len(rules) != 0 {
			t.Fatalf("a late answer made a rule: %v", rules)
		}
	})
}

func TestToolConfirmApp(t *testing.T) {
	t.Run("confirmed", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmApp))
		if tc := a.nextToolCall("c1"); !tc.ConfirmRequired {
			t.Fatalf("%+v", tc)
		}
		a.expectFrames()
		if got := relay.Events(); len(got) != 0 {
			t.Fatalf("acknowledged before awaiting_confirmation: %v", got)
		}
		a.awaiting("c1")
		a.expectFrames()
		expectRelay(t, relay, "ack notes c1")
		a.awaiting("c1") // twice: ignored
		a.ok("c1", `{"line":3}`)
		a.awaiting("c1") // late: ignored
		a.expectFrames()
		expectRelay(t, relay, "ack notes c1", `fin notes c1 ok {"line":3}`)
	})
	t.Run("skipped", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmApp))
		a.nextToolCall("c1")
		a.ok("c1", "")
		a.expectFrames(cancelLine("c1", frame.CodeConfirmationSkipped))
		expectRelay(t, relay, "ack notes c1", "fin notes c1 error confirmation_skipped")
	})
	t.Run("awaiting without confirm_required", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		a, ctx := h.toolApp(toolEntry("notes"))
		h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmNone))
		a.nextToolCall("c1")
		a.awaiting("c1")
		a.ok("c1", "")
		a.expectFrames()
		expectRelay(t, relay, "ack notes c1", "fin notes c1 ok")
	})
}

func TestToolTimeout(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	w := kc(ctx, "w", "notes.append", RiskWrite, ConfirmNone)
	w.TimeoutMS = 20
	h.call("notes", w)
	a.nextToolCall("w")
	expectRelay(t, relay, "ack notes w", "fin notes w outcome_unknown timeout")
	r := kc(ctx, "r", "notes.search", RiskRead, ConfirmNone)
	r.TimeoutMS = 20
	h.call("notes", r)
	if d := a.next(); line(d) != cancelLine("w", "timeout") {
		t.Fatalf("got %#v", d)
	}
	a.nextToolCall("r")
	expectRelay(t, relay, "ack notes w", "fin notes w outcome_unknown timeout", "ack notes r", "fin notes r error timeout")
	a.ok("w", "")
	a.ok("r", "")
	a.expectFrames(cancelLine("r", "timeout"))
	if got := relay.Events(); len(got) != 4 {
		t.Fatalf("late results reached the relay: %v", got)
	}
}

func TestToolRiskFailsSafe(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	for _, risk := range []string{"", "harmless", "READ"} {
		id := "c" + risk
		call := kc(ctx, id, "notes.search", risk, ConfirmNone)
		call.TimeoutMS = 20
		h.call("notes", call)
		if tc := a.nextToolCall(id); tc.Risk != RiskDestructive {
			t.Fatalf("risk %q went down as %q", risk, tc.Risk)
		}
	}
	// Not read-only: a timeout is an unknown outcome.
	got := relay.WaitFor(6, wait)
	for _, e := range got {
		if e.Finished != nil && e.Finished.Outcome != OutcomeUnknown {
			t.Fatalf("%v", e)
		}
	}
	if len(got) != 6 {
		t.Fatalf("relay %v", got)
	}
}

func TestToolDeath(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	k, _ := h.kernel()
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "w", "notes.append", RiskWrite, ConfirmNone))
	h.call("notes", kc(ctx, "r", "notes.search", RiskRead, ConfirmNone))
	h.call("notes", kc(ctx, "h", "notes.wipe", RiskDestructive, ConfirmHost))
	a.nextToolCall("w")
	a.nextToolCall("r")
	h.events.nextApproval(t)
	h.detach("notes")
	expectRelay(t, relay, "ack notes w", "ack notes r", "ack notes h",
		"fin notes h error cancelled", "fin notes r error cancelled", "fin notes w outcome_unknown cancelled")
	if got := h.events.nextApproval(t); got.State != ApprovalCancelled {
		t.Fatalf("sheet %+v", got)
	}
	// (h.grant opened n0nce-1.)
	for _, want := range []string{"n0nce-1", ctx} {
		if got := k.nextClosed(t); got != "notes "+want+" app_exited" {
			t.Fatalf("kernel %q", got)
		}
	}
	if h.m.HasLink("notes") {
		t.Fatal("HasLink after death")
	}
	if err := h.m.ToolCall("notes", kc(ctx, "x", "notes.search", RiskRead, ConfirmNone)); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("call into a dead app: %v", err)
	}
	// The restarted process has the same peer (consent, the duplicate
	// window) and none of the old contexts.
	b := h.attach(toolEntry("notes"))
	if !h.m.HasLink("notes") {
		t.Fatal("no link after restart")
	}
	ctx2 := b.open(nil)
	if err := h.m.ToolCall("notes", kc(ctx, "x", "notes.search", RiskRead, ConfirmNone)); !errors.Is(err, ErrUnknownContext) {
		t.Fatalf("old context: %v", err)
	}
	if err := h.m.ToolCall("notes", kc(ctx2, "w", "notes.search", RiskRead, ConfirmNone)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("old call id: %v", err)
	}
	h.events.noApproval(t)
	b.expectFrames()
}

func TestToolCloseAccount(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	k, _ := h.kernel()
	a, personal := h.toolApp(toolEntry("notes"))
	work := a.open(map[string]any{"account": "work"})
	p2 := a.open(map[string]any{"account": "personal"})
	h.call("notes", kc(personal, "p1", "notes.append", RiskWrite, ConfirmNone))
	h.call("notes", kc(p2, "p2", "notes.search", RiskRead, ConfirmNone))
	h.call("notes", kc(work, "w1", "notes.search", RiskRead, ConfirmNone))
	for _, id := range []string{"p1", "p2", "w1"} {
		a.nextToolCall(id)
	}
	// (h.grant opened n0nce-1, also personal.)
	if n := h.m.CloseAccount("notes", "personal"); n != 3 {
		t.Fatalf("closed %d contexts", n)
	}
	// Each context: its calls cancelled first, then context_closed.
	a.expectFrames(
		line(&frame.ContextClosed{ContextID: "n0nce-1", Reason: "account_closed"}),
		cancelLine("p1", "account_closed"), line(&frame.ContextClosed{ContextID: personal, Reason: "account_closed"}),
		cancelLine("p2", "account_closed"), line(&frame.ContextClosed{ContextID: p2, Reason: "account_closed"}),
	)
	expectRelay(t, relay, "ack notes p1", "ack notes p2", "ack notes w1",
		"fin notes p1 outcome_unknown cancelled", "fin notes p2 error cancelled")
	for _, want := range []string{"n0nce-1", personal, p2} {
		if got := k.nextClosed(t); got != "notes "+want+" account_closed" {
			t.Fatalf("kernel %q", got)
		}
	}
	// The other account's context and call are untouched.
	if _, err := h.m.ContextOwner("notes", personal); !errors.Is(err, ErrUnknownContext) {
		t.Fatalf("closed context: %v", err)
	}
	if o, err := h.m.ContextOwner("notes", work); err != nil || o != (control.ContextOwner{Account: "work", Client: "notes"}) {
		t.Fatalf("owner %+v %v", o, err)
	}
	a.ok("w1", "")
	a.expectFrames()
	expectRelay(t, relay, "ack notes p1", "ack notes p2", "ack notes w1",
		"fin notes p1 outcome_unknown cancelled", "fin notes p2 error cancelled", "fin notes w1 ok")
	if n := h.m.CloseAccount("ghost", "personal"); n != 0 {
		t.Fatalf("closed %d contexts of an app without a process", n)
	}
}

func TestToolContextClosedByApp(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmApp))
	a.nextToolCall("c1")
	a.awaiting("c1")
	id := a.request(policy.MethodContextClose, map[string]any{"context_id": ctx})
	a.expectFrames(cancelLine("c1", "closed_by_app"), line(&frame.ContextClosed{ContextID: ctx, Reason: "closed_by_app"}),
		line(&frame.Reply{ReqID: id, OK: true, Data: json.RawMessage(`{}`)}))
	expectRelay(t, relay, "ack notes c1", "fin notes c1 outcome_unknown cancelled")
}

func TestToolContextOwnerAndHasLink(t *testing.T) {
	h, _ := newToolHarness(t, nil)
	if h.m.HasLink("notes") {
		t.Fatal("HasLink before attach")
	}
	_, ctx := h.toolApp(toolEntry("notes"))
	_, mailCtx := h.toolApp(toolEntry("mail"))
	if !h.m.HasLink("notes") {
		t.Fatal("no link")
	}
	if o, err := h.m.ContextOwner("notes", ctx); err != nil || o != (control.ContextOwner{Account: "personal", Client: "notes"}) {
		t.Fatalf("owner %+v %v", o, err)
	}
	for _, id := range []string{mailCtx, "n0nce-77", ""} {
		if _, err := h.m.ContextOwner("notes", id); !errors.Is(err, ErrUnknownContext) {
			t.Fatalf("context %q: %v", id, err)
		}
	}
}

func TestToolRelayQueue(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RelayQueue = 3 })
	a, ctx := h.toolApp(toolEntry("notes"))
	// No relay: callbacks queue (bounded: the oldest go first).
	for _, id := range []string{"c1", "c2"} {
		h.call("notes", kc(ctx, id, "notes.search", RiskRead, ConfirmNone))
		a.nextToolCall(id)
		a.ok(id, "")
		a.expectFrames() // the result is handled before the next call
	}
	first := &RecordingToolRelay{}
	h.m.SetToolRelay(first)
	expectRelay(t, first, "fin notes c1 ok", "ack notes c2", "fin notes c2 ok") // "ack notes c1" was dropped
	if n := h.logs.FilterMessageSnippet("were lost").Len(); n != 1 {
		t.Fatalf("loss logged %d times", n)
	}
	// A relay swap mid-call: the outcome goes to whichever is installed
	// when it happens.
	h.call("notes", kc(ctx, "c3", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c3")
	second := &RecordingToolRelay{}
	h.m.SetToolRelay(second)
	a.ok("c3", "")
	a.expectFrames()
	expectRelay(t, first, "fin notes c1 ok", "ack notes c2", "fin notes c2 ok", "ack notes c3")
	expectRelay(t, second, "fin notes c3 ok")
}

// TestToolRelayQueueFair: past the queue's bounds, what goes is the
// oldest outcome of the app that holds the most of the queue, so that an
// app answering many calls (or with large results) while no kernel
// listens cannot push another app's outcomes out of it. It was one queue
// whose oldest went first, whichever app's.
func TestToolRelayQueueFair(t *testing.T) {
	big, err := json.Marshal(map[string]string{"x": strings.Repeat("A", relayRoom-64)}) // the largest a result relays
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		queue int    // RelayQueue: 0 for the default
		calls int    // the other app's
		data  string // its results
		want  []string
	}{
		// 4 callbacks at most: the victim's two, then the other's, whose
		// own oldest go.
		{"by count", 4, 3, "", []string{"ack victim v1", "fin victim v1 ok", "ack evil e2", "fin evil e2 ok"}},
		// 8 MiB at most: nine results of about 1 MiB each.
		{"by bytes", 0, 9, string(big), []string{"ack victim v1", "fin victim v1 ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.RelayQueue = tc.queue })
			victim, vctx := h.toolApp(toolEntry("victim"))
			evil, ectx := h.toolApp(toolEntry("evil"))
			h.call("victim", kc(vctx, "v1", "notes.search", RiskRead, ConfirmNone))
			victim.nextToolCall("v1")
			victim.ok("v1", "")
			victim.expectFrames()
			for i := range tc.calls {
				id := fmt.Sprintf("e%d", i)
				h.call("evil", kc(ectx, id, "notes.search", RiskRead, ConfirmNone))
				evil.nextToolCall(id)
				evil.ok(id, tc.data)
				evil.expectFrames()
			}
			r := &RecordingToolRelay{}
			h.m.SetToolRelay(r)
			got := r.WaitFor(1, wait)
			var victims, names []string
			for _, e := range got {
				s := e.String()
				if strings.Contains(s, " victim ") {
					victims = append(victims, s)
				}
				names = append(names, s[:min(len(s), 24)])
			}
			if !slices.Equal(victims, tc.want[:2]) {
				t.Fatalf("the next relay heard %v of the victim (all: %v), want %v", victims, names, tc.want[:2])
			}
			if tc.queue > 0 {
				expectRelay(t, r, tc.want...)
			}
		})
	}
}

// toolKernel is a kernel that is also the tool relay, as the control
// socket's kernel connection is.
type toolKernel struct {
	*fakeKernel
	*RecordingToolRelay
}

func TestToolKernelIsRelay(t *testing.T) {
	h := newHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	k, ks := h.relayKernel()
	if err := ks.ToolCall("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone), func() {}); err != nil {
		t.Fatal(err)
	}
	a.nextToolCall("c1")
	expectRelay(t, k.RecordingToolRelay, "ack notes c1")
	// Detached: its outcome queues for the next kernel.
	ks.Detach()
	a.ok("c1", "")
	a.expectFrames()
	if err := ks.ToolCall("notes", kc(ctx, "c2", "notes.search", RiskRead, ConfirmNone), func() { t.Error("accepted ran for a refused call") }); !errors.Is(err, ErrKernelDetached) {
		t.Fatalf("detached call: %v", err)
	}
	if err := ks.ToolCancel("notes", "c1"); !errors.Is(err, ErrKernelDetached) {
		t.Fatalf("detached cancel: %v", err)
	}
	k2, ks2 := h.relayKernel()
	defer ks2.Detach()
	expectRelay(t, k2.RecordingToolRelay, "fin notes c1 ok")
	expectRelay(t, k.RecordingToolRelay, "ack notes c1")
}

func TestToolAudit(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "ok", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("ok")
	a.ok("ok", "")
	a.expectFrames()
	h.call("notes", kc(ctx, "deny", "notes.wipe", "", ConfirmHost))
	ap := h.events.nextApproval(t)
	if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); err != nil {
		t.Fatal(err)
	}
	expectRelay(t, relay, "ack notes ok", "fin notes ok ok", "ack notes deny", "fin notes deny error declined")
	got, err := h.m.Audit("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("audit %+v", got)
	}
	e0, e1 := got[0], got[1]
	if e0.App != "notes" || e0.Tool != "notes.search" || e0.Risk != RiskRead || e0.Decision != "none" ||
		e0.Outcome != "ok" || e0.End != "finished" || e0.Account != "personal" || e0.Caller != "assistant" || e0.DurationMS <= 0 {
		t.Fatalf("entry %+v", e0)
	}
	if e1.Tool != "notes.wipe" || e1.Risk != RiskDestructive || e1.Decision != "sheet" || e1.Approved != "deny" ||
		e1.Outcome != "error" || e1.Error != CodeDeclined {
		t.Fatalf("entry %+v", e1)
	}
	if only, _ := h.m.Audit("mail", 0); len(only) != 0 {
		t.Fatalf("mail's audit %+v", only)
	}
	if last, _ := h.m.Audit("notes", 1); len(last) != 1 || last[0].CallID != "deny" {
		t.Fatalf("last entry %+v", last)
	}
	// Persisted: a new store on the same file after the daemon's end.
	h.m.Close()
	h.store.Close()
	s2, err := policy.OpenStoreWith(policy.StoreConfig{Path: h.path})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if again, err := s2.Audit("notes", 0); err != nil || len(again) != 2 {
		t.Fatalf("after reopen %+v %v", again, err)
	}
}

// TestNothingBeforePlace: the kernel's accepted (where the control
// socket queues its answer) runs before anything of the call happens:
// the relay has heard nothing, the app has been sent nothing and no
// sheet is raised, whatever the call's confirm; and all of that follows.
// A call that is refused never runs it.
func TestNothingBeforePlace(t *testing.T) {
	h := newHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	k, ks := h.relayKernel()
	defer ks.Detach()
	for i, confirm := range []string{ConfirmNone, ConfirmApp, ConfirmHost} {
		id := fmt.Sprint("c", i)
		ran := false
		accepted := func() {
			ran = true
			if evs := k.RecordingToolRelay.Events(); len(evs) != 2*i {
				t.Errorf("confirm %s: the relay heard of the call before it was accepted: %v", confirm, evs)
			}
			if n := a.buffered(); n != 0 {
				t.Errorf("confirm %s: the app was sent %d bytes before the call was accepted", confirm, n)
			}
			if n := len(h.events.approvals); n != 0 {
				t.Errorf("confirm %s: %d sheets raised before the call was accepted", confirm, n)
			}
		}
		if err := ks.ToolCall("notes", kc(ctx, id, "notes.search", RiskRead, confirm), accepted); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Fatalf("confirm %s: ToolCall returned before accepted ran", confirm)
		}
		if confirm == ConfirmHost {
			ap := h.events.nextApproval(t)
			if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); err != nil {
				t.Fatal(err)
			}
			expectRelay(t, k.RecordingToolRelay, "ack notes c0", "fin notes c0 ok", "ack notes c1", "fin notes c1 ok", "ack notes c2", "fin notes c2 error declined")
			a.expectFrames()
			break
		}
		a.nextToolCall(id)
		if confirm == ConfirmApp {
			a.awaiting(id)
		}
		a.ok(id, "")
		if evs := k.RecordingToolRelay.WaitFor(2*(i+1), wait); len(evs) != 2*(i+1) {
			t.Fatalf("confirm %s: the relay saw %v", confirm, evs)
		}
	}
	if err := ks.ToolCall("notes", kc(ctx, "c0", "notes.search", RiskRead, ConfirmNone), func() { t.Error("accepted ran for a refused call") }); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("a duplicate: %v", err)
	}
}

// TestRelayedValuesFitALine: what an app writes that the daemon relays (a
// pass-through frame, a tool's result, a request's args) must fit a
// control line once re-encoded, where each <, > and & takes six bytes:
// 200 KiB of '<' fits a hub line but would be 1.2 MiB on the control
// socket, whose clients drop a connection that sends a longer line. The
// app hears bad_frame, or the kernel an error outcome; the same values
// at a tenth of the size go through.
func TestRelayedValuesFitALine(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	seen := 0 // the relay's events so far
	for _, tt := range []struct {
		size int
		fits bool
	}{{20 << 10, true}, {200 << 10, false}} {
		big := strings.Repeat("<", tt.size)
		a.write(`{"shell":"` + big + `"}` + "\n")
		if tt.fits {
			if f := <-h.events.frames; len(f.frame) != tt.size+len(`{"shell":""}`) {
				t.Fatalf("pass-through frame of %d bytes relayed as %d", tt.size, len(f.frame))
			}
		} else if e, ok := a.next().(*frame.ErrorFrame); !ok || e.Code != frame.CodeBadFrame || !strings.Contains(e.Message, "pass-through frame") {
			t.Fatalf("a pass-through frame of %d bytes of '<': got %#v, want bad_frame", tt.size, e)
		}

		id := fmt.Sprintf("c%d", tt.size)
		h.call("notes", kc(ctx, id, "notes.search", RiskRead, ConfirmNone))
		a.nextToolCall(id)
		a.write(`{"octos_peer":{"type":"tool_result","call_id":"` + id + `","ok":true,"data":"` + big + `"}}` + "\n")
		seen += 2 // ack and fin
		fin := relay.WaitFor(seen, wait)
		if len(fin) < seen {
			t.Fatalf("no outcome for a result of %d bytes", tt.size)
		}
		if r := fin[seen-1].Finished; r == nil || (r.Outcome == OutcomeOK) != tt.fits || (!tt.fits && r.Error.Code != frame.CodeQuotaExceeded) {
			t.Fatalf("a result of %d bytes of '<': %v", tt.size, fin[seen-1])
		}

		req := fmt.Sprintf("t%d", tt.size)
		a.write(`{"octos_peer":{"type":"request","req_id":"` + req + `","method":"` + policy.MethodTurnStart + `","args":{"context_id":"` + ctx + `","input":{"text":"` + big + `"}}}}` + "\n")
		if tt.fits {
			a.failReply(req, frame.CodeNoKernel) // it went on, to the kernel this harness lacks
		} else if e := a.failReply(req, frame.CodeBadFrame); !strings.Contains(e.Message, "control socket") {
			t.Fatalf("args of %d bytes of '<': %v", tt.size, e)
		}
	}
	select {
	case f := <-h.events.frames:
		t.Fatalf("relayed a frame of %d bytes", len(f.frame))
	default:
	}
}
