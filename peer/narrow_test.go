package peer

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// grantedContext answers the app's consent prompt with allow, as grant
// does, and returns the context its session.open got.
func grantedContext(h *harness, a *testApp) string {
	h.t.Helper()
	id := a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(h.t)
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
		h.t.Fatal(err)
	}
	h.events.nextApproval(h.t) // settled
	return a.okReply(id)["context_id"].(string)
}

// nextClosed reads the next frame, which must be context_closed of ctx
// by a reload.
func nextClosed(t *testing.T, a *testApp, ctx string) {
	t.Helper()
	if d, ok := a.next().(*frame.ContextClosed); !ok || d.ContextID != ctx || d.Reason != ReasonGrantRevoked {
		t.Fatalf("want context_closed %s grant_revoked, got %#v", ctx, d)
	}
}

// reloaded is the manifest of one app, entry app changed by edit.
func reloaded(app policy.App, edit func(*policy.App)) *policy.Manifest {
	edit(&app)
	return &policy.Manifest{Version: 1, Apps: []policy.App{app}}
}

// TestReloadNarrowsLiveLink: a reload that narrows an app's grants
// applies to its running process at once: what the narrowed grant no
// longer allows ends (contexts close, turns end, calls end, waiting
// requests fail) and the next request or call is refused, on the same
// link, without a restart.
func TestReloadNarrowsLiveLink(t *testing.T) {
	t.Run("a method, while its request waits for consent", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		a := h.attach(app)
		waiting := a.request(policy.MethodSessionOpen, nil)
		ap := h.events.nextApproval(t)
		h.m.SetManifest(reloaded(app, func(e *policy.App) {
			e.Grants.Methods = []string{policy.MethodTurnInterrupt}
		}))
		a.failReply(waiting, frame.CodeNotGranted)
		// The prompt stands (the service is still granted); answered, it
		// serves nothing the grant no longer allows.
		if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
			t.Fatal(err)
		}
		next := a.request(policy.MethodTurnInterrupt, map[string]any{"context_id": "c", "turn_id": "t"})
		a.failReply(next, frame.CodeUnknownContext)
	})

	t.Run("the service", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		a := h.attach(app)
		ctx := grantedContext(h, a)
		k, ks := h.kernel()
		turn := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"})
		k.nextRequest(t)
		if err := ks.Reply(KernelReply{App: "notes", ReqID: turn, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); err != nil {
			t.Fatal(err)
		}
		a.okReply(turn)

		h.m.SetManifest(reloaded(app, func(e *policy.App) { e.Grants = policy.Grants{} }))
		if got := string(a.event(turn)); got != `{"reason":"grant_revoked","turn_id":"T1","type":"turn.end"}` {
			t.Fatalf("the streaming turn ended with %s", got)
		}
		nextClosed(t, a, ctx)
		if got, want := k.nextClosed(t), "notes "+ctx+" grant_revoked"; got != want {
			t.Errorf("kernel got context.closed %q, want %q", got, want)
		}
		a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeNotGranted)
		if st := h.m.LinkStatus("notes"); st.Connected {
			t.Errorf("link status %+v: an app without the service has no peer link", st)
		}
	})

	t.Run("the service, with its consent prompt open", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		a := h.attach(app)
		waiting := a.request(policy.MethodSessionOpen, nil)
		ap := h.events.nextApproval(t)
		h.m.SetManifest(reloaded(app, func(e *policy.App) { e.Grants = policy.Grants{} }))
		a.failReply(waiting, frame.CodeNotGranted)
		if got := h.events.nextApproval(t); got.ApprovalID != ap.ApprovalID || got.State != ApprovalCancelled {
			t.Fatalf("the prompt: %+v, want %s cancelled", got, ap.ApprovalID)
		}
		if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); !errors.Is(err, ErrUnknownApproval) {
			t.Fatalf("approve a withdrawn prompt: %v", err)
		}
	})

	t.Run("an account", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		app := toolEntry("notes")
		a := h.attach(app)
		personal := grantedContext(h, a)
		work := a.open(map[string]any{"account": "work"})
		k, _ := h.kernel()
		h.call("notes", kc(personal, "c1", "notes.search", RiskRead, ConfirmNone))
		a.nextToolCall("c1")

		h.m.SetManifest(reloaded(app, func(e *policy.App) { e.Sandbox.Accounts = []string{"work"} }))
		a.expectFrames(cancelLine("c1", ReasonGrantRevoked), line(&frame.ContextClosed{ContextID: personal, Reason: ReasonGrantRevoked}))
		expectRelay(t, relay, "ack notes c1", "fin notes c1 error cancelled")
		if got, want := k.nextClosed(t), "notes "+personal+" grant_revoked"; got != want {
			t.Errorf("kernel got context.closed %q, want %q", got, want)
		}
		if err := h.m.ToolCall("notes", kc(personal, "c2", "notes.search", RiskRead, ConfirmNone)); !errors.Is(err, ErrUnknownContext) {
			t.Fatalf("a call in the closed context: %v", err)
		}
		a.failReply(a.request(policy.MethodSessionOpen, map[string]any{"account": "personal"}), frame.CodeNotGranted)
		// The other account's context goes on.
		a.okReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": work}))
	})

	t.Run("a tool", func(t *testing.T) {
		h, relay := newToolHarness(t, nil)
		app := toolEntry("notes")
		a, ctx := h.toolApp(app)
		h.call("notes", kc(ctx, "w1", "notes.append", RiskWrite, ConfirmNone))
		a.nextToolCall("w1")
		h.call("notes", kc(ctx, "s1", "notes.search", RiskRead, ConfirmNone))
		a.nextToolCall("s1")

		h.m.SetManifest(reloaded(app, func(e *policy.App) { e.Grants.Tools = []string{"notes.search"} }))
		a.expectFrames(cancelLine("w1", ReasonGrantRevoked))
		// Sent and not a read: it may have happened.
		expectRelay(t, relay, "ack notes w1", "ack notes s1", "fin notes w1 outcome_unknown declined")
		if err := h.m.ToolCall("notes", kc(ctx, "w2", "notes.append", RiskWrite, ConfirmNone)); !errors.Is(err, ErrDeclined) {
			t.Fatalf("a call of the revoked tool: %v", err)
		}
		// The tool still granted goes on.
		a.ok("s1", `1`)
		expectRelay(t, relay, "ack notes w1", "ack notes s1", "fin notes w1 outcome_unknown declined", "fin notes s1 ok 1")
	})

	t.Run("the app removed from the manifest", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		ctx := grantedContext(h, a)
		h.m.SetManifest(&policy.Manifest{Version: 1, Apps: []policy.App{}})
		nextClosed(t, a, ctx)
		a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeNotGranted)
	})
}

// TestAttachTakesTheManifestsGrants: a process whose start read its entry
// before a reload narrowed it (the supervisor hands Attach that entry)
// gets the manifest's grants, not the entry's.
func TestAttachTakesTheManifestsGrants(t *testing.T) {
	h := newHarness(t, nil)
	started := notesApp("notes")
	h.m.SetManifest(reloaded(started, func(e *policy.App) {
		e.Grants.Methods = slices.DeleteFunc(slices.Clone(e.Grants.Methods), func(m string) bool { return m == policy.MethodSessionHistory })
	}))
	a := h.attach(started)
	h.grant(a)
	a.failReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": "c"}), frame.CodeNotGranted)
}
