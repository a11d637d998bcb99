package peer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"octosup/control"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// CodeDeclined is a tool call's outcome code when a standing rule or the
// person said no; it only reaches the relay.
const CodeDeclined = "declined"

// CodeQueueFull is ErrQueueFull's code, in outcomes and refusals; it never
// reaches the app.
const CodeQueueFull = "queue_full"

// CodeQuotaExceeded is ErrLimit's code (docs/protocol.md, "Limits"); apps
// read it in replies too.
const CodeQuotaExceeded = frame.CodeQuotaExceeded

// Defaults of the tool-call layer's Config fields.
const (
	DefaultMaxToolTimeout  = 10 * time.Minute
	DefaultRelayQueue      = 4096
	DefaultDuplicateWindow = 4096
	maxArgsSummary         = 256 // bytes of args on a host sheet
)

// Outcome is how a call ended.
type Outcome int

const (
	OutcomeOK      Outcome = iota + 1 // the app ran it: Result.Data
	OutcomeError                      // it did not happen: Result.Error says why
	OutcomeUnknown                    // it reached the app and may or may not have happened
)

func (o Outcome) String() string {
	if o >= OutcomeOK && o <= OutcomeUnknown {
		return [...]string{"ok", "error", "outcome_unknown"}[o-1]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MarshalText writes the wire name (tool.finished's "outcome").
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Result is a call's one outcome: Data for OutcomeOK (nil when the app
// sent none); Error for OutcomeError, and for OutcomeUnknown why it is
// not known.
type Result struct {
	Outcome Outcome
	Data    json.RawMessage
	Error   *Error
}

// ToolRelay hears one Acknowledged, then one Finished, per accepted call.
// Its methods run one at a time, in order per app, under the relay's lock
// and (doc.go, rule 4) the peer's; they must neither block (queue, or
// drop for a slow client) nor call the Manager.
type ToolRelay interface {
	// Acknowledged: the call is in hand (confirm none: written to the
	// app; host: accepted, before any sheet; app: the app reported
	// awaiting_confirmation), or just before it finishes sooner.
	Acknowledged(app, callID string)
	// Finished: the call's outcome, its last word.
	Finished(app, callID string, r Result)
}

// toolCall accepts a call and places it in one step, running accepted in
// between: nothing of the call (relay, app, sheet, store) precedes it. ks
// is nil for the tests' relay seam.
func (m *Manager) toolCall(app string, kc control.ToolCall, ks *KernelSession, accepted func()) error {
	m.mu.Lock()
	closed, p := m.closed, m.peers[app]
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	args, confirm, err := m.checkCall(kc)
	if err != nil {
		return err
	}
	if p == nil {
		return ErrNotConnected
	}
	err = ErrClosed
	p.run(func() {
		// Checked again in the step: a detach since swept this peer, and
		// the kernel must hear nothing after it.
		if err = ks.check(); err != nil {
			return
		}
		var c *call
		if c, err = p.acceptCall(kc, args, confirm); err != nil {
			return
		}
		if accepted != nil {
			accepted()
		}
		p.place(c)
	})
	return err
}

// toolCancel withdraws an outstanding call, re-checking ks (nil: the
// tests' relay seam) in the step as toolCall does.
func (m *Manager) toolCancel(app, callID string, ks *KernelSession) error {
	err := ErrUnknownCall
	m.onLink(app, func(p *peer, l *link) {
		if err = ks.check(); err != nil {
			return
		}
		if c := l.calls[callID]; c != nil {
			p.endCall(c, callCancelled, failResult(c, frame.CodeCancelled, "the caller cancelled the call"), "cancelled")
		} else {
			err = ErrUnknownCall
		}
	})
	return err
}

// onLink runs f in a step of app's peer while a process is attached.
func (m *Manager) onLink(app string, f func(p *peer, l *link)) {
	if p := m.peerOf(app); p != nil {
		p.run(func() {
			if p.link != nil {
				f(p, p.link)
			}
		})
	}
}

// ContextOwner returns the account and client of one of app's open
// contexts; any other id is ErrUnknownContext.
func (m *Manager) ContextOwner(app, contextID string) (control.ContextOwner, error) {
	var o control.ContextOwner
	err := refuse(ErrUnknownContext, "the app has no open context %s", contextID)
	m.onLink(app, func(_ *peer, l *link) {
		if c := l.contexts[contextID]; c != nil {
			o, err = control.ContextOwner{Account: c.account, Client: c.client}, nil
		}
	})
	return o, err
}

// Contexts lists app's open contexts by id: what a tool call may name.
func (m *Manager) Contexts(app string) []control.ContextInfo {
	out := []control.ContextInfo{}
	m.onLink(app, func(_ *peer, l *link) {
		for _, c := range l.contexts {
			out = append(out, control.ContextInfo{ContextID: c.id, Account: c.account, Client: c.client})
		}
	})
	slices.SortFunc(out, func(a, b control.ContextInfo) int { return strings.Compare(a.ContextID, b.ContextID) })
	return out
}

// CloseAccount signs app out of account, closing its contexts with it
// (closeContext), and returns how many closed.
func (m *Manager) CloseAccount(app, account string) int {
	var closing []*appContext
	m.onLink(app, func(p *peer, l *link) {
		closing = sortedValues(l.contexts, func(c *appContext) bool { return c.account == account })
		for _, c := range closing {
			p.closeContext(c, "account_closed", true)
		}
	})
	return len(closing)
}

// Audit returns the last limit finished calls of app ("" for all), oldest
// first, including those not yet on disk.
func (m *Manager) Audit(app string, limit int) ([]policy.AuditEntry, error) {
	if err := m.audit.flush(); err != nil {
		return nil, err
	}
	return m.store.Audit(app, limit)
}
