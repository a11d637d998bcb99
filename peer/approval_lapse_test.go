package peer

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// TestConsentLapsedWhileDecidingExpires: a consent prompt whose deadline
// passes while Approve writes the answer, and whose write then fails,
// expires: its requests hear consent_required and nothing stays pending
// with no deadline to end it.
func TestConsentLapsedWhileDecidingExpires(t *testing.T) {
	var failing atomic.Bool
	var h *harness
	h = newHarness(t, func(c *Config) {
		c.ConsentTimeout = 50 * time.Millisecond
		c.Store = newGatedStore(c.Store.(*policy.Store), func(app string) error {
			if failing.Load() {
				h.m.timers.Wait() // the prompt's deadline fires while the answer is written
				return errors.New("disk full")
			}
			return nil
		})
	})
	a := h.attach(notesApp("notes"))
	id := a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(t)
	failing.Store(true)
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err == nil {
		t.Fatal("Approve succeeded; want the write's failure")
	}
	failing.Store(false)
	a.failReply(id, frame.CodeConsentRequired)
	if ap := h.events.nextApproval(t); ap.State != ApprovalExpired {
		t.Fatalf("%+v, want expired", ap)
	}
	if n := len(h.m.Approvals()); n != 0 {
		t.Fatalf("%d approvals still pending", n)
	}
}
