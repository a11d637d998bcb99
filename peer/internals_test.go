package peer

import "octosup/policy"

// Test helpers that look at a peer's state: locked, as its own functions
// do.

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
		p.run(func() { f(p) })
	}
}

// setRule keeps a standing rule as Approve with remember does: in the
// store, then in the app's peer.
func (h *harness) setRule(r policy.Rule) {
	h.t.Helper()
	if err := h.store.SetRule(r); err != nil {
		h.t.Fatal(err)
	}
	h.m.inspect(r.App, func(p *peer) { p.choices.rules[r.Tool] = r.Decision })
}
