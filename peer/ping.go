package peer

import (
	"context"
	"fmt"
)

// Ping is a bounded round trip through the peer side, for the daemon's
// watchdog: every app's peer and the feed each run a function of Ping's
// before ctx is done. It reports the first that did not, by name.
func (m *Manager) Ping(ctx context.Context) error {
	m.mu.Lock()
	peers := make([]*peer, 0, len(m.peers))
	for _, p := range m.peers {
		peers = append(peers, p)
	}
	m.mu.Unlock()
	// Posted all at once, so that the bound is for the slowest, not the
	// sum.
	type pong struct {
		name string
		done chan struct{}
	}
	pongs := make([]pong, 0, len(peers)+1)
	ping := func(name string, s *serial) {
		done := make(chan struct{})
		if s.post(func() { close(done) }) {
			pongs = append(pongs, pong{name, done})
		}
	}
	for _, p := range peers {
		ping("app "+p.id, &p.in)
	}
	ping("the kernel feed", &m.feed.in)
	for _, p := range pongs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("the peer side did not answer (%s): %w", p.name, ctx.Err())
		}
	}
	return nil
}
