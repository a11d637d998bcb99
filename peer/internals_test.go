package peer

// Test helpers that look at a peer's state: on its serial, as its own
// functions do.

// currentLink is app's current link (nil: none). m.mu is held.
func (m *Manager) currentLink(app string) *link {
	if p := m.peers[app]; p != nil {
		return p.cur.Load()
	}
	return nil
}

// inspect runs f on app's peer and waits for it.
func (m *Manager) inspect(app string, f func(p *peer)) {
	if p := m.peerOf(app); p != nil {
		p.call(func() { f(p) })
	}
}
