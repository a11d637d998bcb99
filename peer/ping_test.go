package peer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPing: Ping answers through every app's peer, and names the one
// that does not answer in time.
func TestPing(t *testing.T) {
	h := newHarness(t, nil)
	h.attach(notesApp("notes"))
	h.attach(notesApp("mail"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.m.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	mail := h.m.peerOf("mail")
	mail.mu.Lock() // a peer function that never returns
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err := h.m.Ping(short)
	mail.mu.Unlock()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "app mail") {
		t.Fatalf("ping with a wedged peer: %v", err)
	}
	if err := h.m.Ping(ctx); err != nil {
		t.Fatalf("ping after: %v", err)
	}
}
