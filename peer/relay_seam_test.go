package peer

import "octosup/control"

// The relay seam: the tests hand calls to the Manager, and hear their
// outcomes, without a kernel attached. The daemon's calls come from the
// attached kernel (KernelSession.ToolCall), which is also the relay.

// SetToolRelay installs r as the relay of every call's outcome (nil
// uninstalls it). Outcomes produced while none was installed are handed
// to r first, in order. An attached kernel that implements ToolRelay is
// the relay while it is attached; SetToolRelay replaces it.
func (m *Manager) SetToolRelay(r ToolRelay) {
	m.relay.mu.Lock()
	dropped := m.relay.install(r, nil)
	m.relay.mu.Unlock()
	m.relay.logDropped(dropped)
}

// ToolCall is KernelSession.ToolCall with no kernel.
func (m *Manager) ToolCall(app string, kc control.ToolCall) error {
	return m.toolCall(app, kc, nil, nil)
}

// ToolCancel is KernelSession.ToolCancel with no kernel.
func (m *Manager) ToolCancel(app, callID string) error { return m.toolCancel(app, callID, nil) }
