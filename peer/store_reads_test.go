package peer

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"octosup/policy"
)

// TestConsentReadOffTheLock: the consent decision is read without the
// Manager's lock (the hook between the read and its use calls back into
// the Manager), and a revoke that lands between the two is not undone
// by the older read: the request asks the person.
func TestConsentReadOffTheLock(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.store.SetConsent(policy.Consent{App: "notes", Decision: policy.Allow, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	h.m.afterConsentRead = func() {
		once.Do(func() {
			// Takes m.mu: a read under it would deadlock here.
			if found, err := h.m.RevokeConsent("notes"); !found || err != nil {
				t.Errorf("revoke: %v %v", found, err)
			}
		})
	}
	a := h.attach(notesApp("notes"))
	id := a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(t) // asked: the revoke stood
	if ap.Kind != KindConsent {
		t.Fatalf("approval %+v", ap)
	}
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
		t.Fatal(err)
	}
	h.events.nextApproval(t)
	a.okReply(id)
}

// TestRuleReadOffTheLock: a host call's standing rule is read without
// the Manager's lock, and an approve --remember that lands between the
// read (no rule yet) and the call's placing is not missed: the call is
// delivered under the new rule instead of raising a sheet.
func TestRuleReadOffTheLock(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	// The hook is set once, before any call: a rule read of an earlier
	// call may still run on the store serial when the next stage's is
	// chosen.
	var stage atomic.Pointer[func()]
	h.m.afterRuleRead = func() {
		if f := stage.Load(); f != nil {
			(*f)()
		}
	}
	a, ctx := h.toolApp(toolEntry("notes"))
	h.call("notes", kc(ctx, "c0", "notes.append", RiskWrite, ConfirmHost))
	sheet := h.events.nextApproval(t)
	var once sync.Once
	approve := func() {
		once.Do(func() {
			// Takes m.mu: a read under it would deadlock here.
			if err := h.m.Approve(sheet.ApprovalID, policy.Allow, true); err != nil {
				t.Errorf("approve: %v", err)
			}
		})
	}
	stage.Store(&approve)
	h.call("notes", kc(ctx, "c1", "notes.append", RiskWrite, ConfirmHost))
	if s := h.events.nextApproval(t); s.ApprovalID != sheet.ApprovalID || s.State != ApprovalAllowed {
		t.Fatalf("settled %+v", s)
	}
	h.events.noApproval(t) // c1 raised none
	a.nextToolCall("c0")
	a.nextToolCall("c1")
	expectRelay(t, relay, "ack notes c0", "ack notes c1")
	// And a revoke in the same place: the next call asks again.
	var once2 sync.Once
	revoke := func() {
		once2.Do(func() {
			if _, err := h.m.RevokeRules("notes", "notes.append"); err != nil {
				t.Errorf("revoke: %v", err)
			}
		})
	}
	stage.Store(&revoke)
	h.call("notes", kc(ctx, "c2", "notes.append", RiskWrite, ConfirmHost))
	if s := h.events.nextApproval(t); s.CallID != "c2" || s.State != ApprovalPending {
		t.Fatalf("after the revoke: %+v", s)
	}
}
