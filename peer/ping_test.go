package peer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"octosup/policy"
)

// TestPing: Ping answers while the Manager's lock comes free, and fails
// within its bound while something holds it.
func TestPing(t *testing.T) {
	store, err := policy.OpenStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m := New(Config{Store: store, Events: newFakeEvents()})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Ping(ctx); err != nil {
		t.Fatalf("Ping of an idle Manager: %v", err)
	}
	m.mu.Lock() // a wedged link
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := m.Ping(short); err == nil {
		t.Fatal("Ping answered while the Manager's lock was held")
	}
	m.mu.Unlock()
	if err := m.Ping(ctx); err != nil {
		t.Fatalf("Ping once the lock is free again: %v", err)
	}
}
