package peer

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Ping, for the daemon's watchdog, locks and unlocks every peer before ctx
// is done, else names the first that was not. A peer that stays locked is
// a bug (no step waits); the goroutine that locks them then waits with it.
func (m *Manager) Ping(ctx context.Context) error {
	peers := m.peerList()
	var at atomic.Pointer[peer]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range peers {
			at.Store(p)
			p.mu.Lock()
			//lint:ignore SA2001 the round trip is the point
			p.mu.Unlock()
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		name := "no app yet"
		if p := at.Load(); p != nil {
			name = "app " + p.id
		}
		return fmt.Errorf("the peer side did not answer (%s): %w", name, ctx.Err())
	}
}
