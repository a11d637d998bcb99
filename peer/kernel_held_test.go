package peer

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHeldKernelWaitsForStart: a session attached held keeps the feed,
// and with it every call to its kernel, until Start; Detach of a session
// never started does not leave the feed held.
func TestHeldKernelWaitsForStart(t *testing.T) {
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
	if err := ping(); err == nil || !strings.Contains(err.Error(), "feed") {
		t.Fatalf("Ping of a held feed: %v, want the feed named", err)
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
