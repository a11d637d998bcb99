package peer

import (
	"errors"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"octosup/policy"
)

// TestAttachAnswersFirst: AttachKernel's answered runs before anything
// reaches the kernel, the outcomes kept while no relay was installed
// included; an attach that is refused never runs it. (The control
// socket queues kernel.attach's answer there: the kernel hears it
// first.)
func TestAttachAnswersFirst(t *testing.T) {
	h := newHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c1")
	a.ok("c1", "")
	a.framesUntilSync() // c1's outcome is kept: no relay yet

	k := toolKernel{newFakeKernel(), &RecordingToolRelay{}}
	var atAnswer []RelayEvent
	answered := 0
	ks, err := h.m.AttachKernel(k, func() {
		answered++
		atAnswer = k.RecordingToolRelay.Events()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Detach()
	if answered != 1 || len(atAnswer) != 0 {
		t.Fatalf("answered ran %d times, with the relay holding %v", answered, atAnswer)
	}
	expectRelay(t, k.RecordingToolRelay, "ack notes c1", "fin notes c1 ok")
	if _, err := h.m.AttachKernel(newFakeKernel(), func() { t.Error("answered ran for a refused attach") }); !errors.Is(err, ErrKernelAttached) {
		t.Fatalf("a second attach: %v", err)
	}
}

// TestDetachIsTheLastCallback: once Detach returns, its relay hears
// nothing more; outcomes after it are kept for the next relay.
func TestDetachIsTheLastCallback(t *testing.T) {
	h := newHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	k, ks := h.relayKernel()
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	ks.Detach()
	a.nextToolCall("c1")
	a.ok("c1", "")
	a.framesUntilSync()
	if got := k.RecordingToolRelay.Events(); len(got) != 1 {
		t.Fatalf("the relay had %v, want c1's ack alone", got)
	}
	next := &RecordingToolRelay{}
	h.m.SetToolRelay(next)
	expectRelay(t, next, "fin notes c1 ok")
}

// TestNoCallAfterDetach: a kernel's tool call (or cancel) that passed
// its check of the kernel before a Detach, and reaches the app's peer
// after it, is refused there: the kernel hears nothing after Detach
// returned (not even its answer "accepted"), and the app gets no call
// (no tool_cancel). Both used to go through.
func TestNoCallAfterDetach(t *testing.T) {
	h := newHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	k, ks := h.relayKernel()
	ks.Detach()
	// What KernelSession.ToolCall does past its own check, as a call that
	// raced the Detach does.
	err := h.m.toolCall("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone), ks, func() {
		t.Error("the call was accepted after its kernel detached")
	})
	if !errors.Is(err, ErrKernelDetached) {
		t.Fatalf("a call after its kernel's Detach: %v, want ErrKernelDetached", err)
	}
	if got := a.framesUntilSync(); len(got) != 0 {
		t.Fatalf("the app was sent %v", got)
	}
	if got := k.RecordingToolRelay.Events(); len(got) != 0 {
		t.Fatalf("the detached kernel heard %v", got)
	}

	// A cancel likewise: the call it names stays the next kernel's.
	k2, ks2 := h.relayKernel()
	h.call("notes", kc(ctx, "c2", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c2")
	ks2.Detach()
	if err := h.m.toolCancel("notes", "c2", ks2); !errors.Is(err, ErrKernelDetached) {
		t.Fatalf("a cancel after its kernel's Detach: %v, want ErrKernelDetached", err)
	}
	if got := a.framesUntilSync(); len(got) != 0 {
		t.Fatalf("the app was sent %v after a detached kernel's cancel", got)
	}
	if got := k2.RecordingToolRelay.Events(); len(got) != 1 {
		t.Fatalf("the detached kernel heard %v, want c2's ack alone", got)
	}
}

// TestPolicyIsReadOnce: the consent decisions and standing rules in the
// store are read when the Manager starts, and every check after is a
// lookup: an app with consent is served without a prompt, a tool with a
// standing allow is delivered without a sheet, and a revoke of an app
// that has no process yet still takes.
func TestPolicyIsReadOnce(t *testing.T) {
	h := newHarness(t, nil)
	now := time.Now()
	for _, err := range []error{
		h.store.SetConsent(policy.Consent{App: "notes", Decision: policy.Allow, At: now}),
		h.store.SetConsent(policy.Consent{App: "mail", Decision: policy.Allow, At: now}),
		h.store.SetRule(policy.Rule{App: "notes", Tool: "notes.append", Decision: policy.Allow, At: now}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	h.restart()
	relay := &RecordingToolRelay{}
	h.m.SetToolRelay(relay)
	if found, err := h.m.RevokeConsent("mail"); !found || err != nil {
		t.Fatalf("revoke mail: %v %v", found, err)
	}

	a := h.attach(toolEntry("notes"))
	ctx := a.open(nil) // no prompt
	h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmHost))
	a.nextToolCall("c1") // no sheet: the rule
	h.events.noApproval(t)

	b := h.attach(notesApp("mail"))
	b.request(policy.MethodSessionOpen, nil)
	if ap := h.events.nextApproval(t); ap.App != "mail" || ap.Kind != KindConsent {
		t.Fatalf("after the revoke: %+v", ap)
	}
	if got := relay.Events(); !slices.ContainsFunc(got, func(e RelayEvent) bool { return e.String() == "ack notes c1" }) {
		t.Fatalf("the relay saw %v", got)
	}
}

// restart replaces the harness's Manager by a new one on the same store,
// as a daemon restart does.
func (h *harness) restart() {
	h.t.Helper()
	h.m.Close()
	h.m = New(Config{Store: h.store, Events: h.events, Log: zap.NewNop(), Nonce: "n0nce2"})
}

// TestDetachSweepsUnderTheManagerLock: Detach unsets the kernel and ends
// its requests in one step under Manager.mu, so no next kernel attaches
// in between (it used to, and the old kernel's sweep then failed the
// requests the new one had been sent).
func TestDetachSweepsUnderTheManagerLock(t *testing.T) {
	h := newHarness(t, nil)
	_, ks := h.kernel()
	h.attach(notesApp("notes"))
	p := h.m.peerOf("notes")
	p.mu.Lock() // the sweep waits here
	done := make(chan struct{})
	go func() { ks.Detach(); close(done) }()
	for h.m.kernel.Load() != nil {
		runtime.Gosched()
	}
	free := false
	for range 1000 {
		if h.m.mu.TryLock() {
			h.m.mu.Unlock()
			free = true
			break
		}
		runtime.Gosched()
	}
	p.mu.Unlock()
	<-done
	if free {
		t.Fatal("Manager.mu was free between the kernel's unset and its sweep: a next kernel could attach there")
	}
}

// TestRevokeWaitsForTheApproveBeforeIt: a revoke reads the app's
// decisions back behind the store writes queued before it (an approve's),
// so the peer ends with what the store holds, whatever the order the two
// ran in: an approve --remember cannot put back a rule a revoke removed.
func TestRevokeWaitsForTheApproveBeforeIt(t *testing.T) {
	gate, atGate := make(chan struct{}), make(chan struct{}, 1)
	var gated atomic.Bool
	h, _ := newToolHarness(t, func(c *Config) {
		c.Store = newGatedStore(c.Store.(*policy.Store), func(app string) error {
			if app == "notes" && gated.CompareAndSwap(true, false) {
				atGate <- struct{}{}
				<-gate
			}
			return nil
		})
	})
	a, ctx := h.toolApp(toolEntry("notes"))
	h.setRule(policy.Rule{App: "notes", Tool: "notes.wipe", Decision: policy.Allow})
	h.call("notes", kc(ctx, "h1", "notes.append", RiskWrite, ConfirmHost))
	sheet := h.events.nextApproval(t)

	gated.Store(true)
	p := h.m.peerOf("notes")
	queued := func() int {
		p.jobs.mu.Lock()
		defer p.jobs.mu.Unlock()
		return len(p.jobs.q)
	}
	approved := make(chan error, 1)
	go func() { approved <- h.m.Approve(sheet.ApprovalID, policy.Allow, true) }()
	<-atGate // the approve's job waits at the gate, before its write
	revoked := make(chan error, 1)
	go func() {
		_, err := h.m.RevokeRules("notes", "")
		revoked <- err
	}()
	deadline := time.Now().Add(wait)
	for queued() < 1 {
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("the revoke did not queue its read-back behind the approve's write")
		}
		runtime.Gosched()
	}
	close(gate)
	if err := <-approved; err != nil {
		t.Fatal(err)
	}
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	a.nextToolCall("h1")
	stored, _ := h.m.Rules("notes")
	var held map[string]policy.Decision
	h.m.inspect("notes", func(p *peer) { held = maps.Clone(p.choices.rules) })
	want := map[string]policy.Decision{}
	for _, r := range stored {
		want[r.Tool] = r.Decision
	}
	if !maps.Equal(held, want) {
		t.Fatalf("the peer holds rules %v, the store %v", held, want)
	}
}

// TestRevokeHoldsWhenTheReadBackFails: a revoke whose read of the app's
// decisions back from the store fails still takes in the peer: it
// applies its own change, and the next call of the revoked tool asks
// the person. (Keeping the decisions from before would have kept the
// rule in force until a restart, while the store had dropped it.)
func TestRevokeHoldsWhenTheReadBackFails(t *testing.T) {
	var failReads atomic.Bool
	h, _ := newToolHarness(t, func(c *Config) {
		c.Store = newGatedStore(c.Store.(*policy.Store), func(app string) error {
			if app == "notes" && failReads.Load() {
				return errors.New("the store cannot read")
			}
			return nil
		})
	})
	a, ctx := h.toolApp(toolEntry("notes"))
	h.setRule(policy.Rule{App: "notes", Tool: "notes.wipe", Decision: policy.Allow})
	failReads.Store(true)
	if gone, err := h.m.RevokeRules("notes", "notes.wipe"); err != nil || len(gone) != 1 {
		t.Fatalf("revoke: %v %v", gone, err)
	}
	h.call("notes", kc(ctx, "w1", "notes.wipe", RiskDestructive, ConfirmHost))
	if s := h.events.nextApproval(t); s.CallID != "w1" || s.State != ApprovalPending {
		t.Fatalf("after the revoke the call got %+v, want a sheet", s)
	}
	a.expectFrames() // and nothing was delivered to the app
}
