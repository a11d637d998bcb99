package peer

import (
	"context"
	"testing"
	"time"
)

// TestHeldKernelKeepsNoFeed: a session attached held keeps the calls to
// its kernel until Start (TestHeldKernelHoldsUpNothing), not the feed:
// the watchdog's Ping of the feed answers before the Start, after it,
// and after a session never started is detached.
func TestHeldKernelKeepsNoFeed(t *testing.T) {
	h, _ := newToolHarness(t, nil)
	ks, err := h.m.AttachKernelHeld(newFakeKernel())
	if err != nil {
		t.Fatal(err)
	}
	ping := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		return h.m.Ping(ctx)
	}
	if err := ping(); err != nil {
		t.Fatalf("Ping while a kernel waits for its Start: %v", err)
	}
	ks.Start()
	if err := ping(); err != nil {
		t.Fatalf("Ping after Start: %v", err)
	}
	ks.Detach()

	held, err := h.m.AttachKernelHeld(newFakeKernel())
	if err != nil {
		t.Fatal(err)
	}
	held.Detach() // its answer never went out
	if err := ping(); err != nil {
		t.Fatalf("Ping after detaching a session never started: %v", err)
	}
	if _, err := h.m.AttachKernel(newFakeKernel()); err != nil {
		t.Fatalf("attach after it: %v", err)
	}
}
