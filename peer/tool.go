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

// CodeDeclined is the error code of a tool call's outcome when a standing
// rule or the person said no to it (docs/protocol.md lists the link's codes; this
// one only ever reaches the relay).
const CodeDeclined = "declined"

// CodeQueueFull is the error code of a tool call's outcome, and of the
// kernel's and app.send's refusals, when the app's write queue had no
// room for the frame (ErrQueueFull). It only reaches the relay and the
// control socket, never the app.
const CodeQueueFull = "queue_full"

// CodeQuotaExceeded is the error code of ErrLimit: the app is at one of
// the daemon's limits (docs/protocol.md, "Limits"). Apps read it in
// replies too.
const CodeQuotaExceeded = frame.CodeQuotaExceeded

// Defaults of the tool-call layer's Config fields.
const (
	DefaultMaxToolTimeout  = 10 * time.Minute
	DefaultRelayQueue      = 4096
	DefaultDuplicateWindow = 4096
	// maxArgsSummary bounds the args shown on a host confirmation sheet.
	maxArgsSummary = 256
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

// Result is a call's one outcome. Data is set for OutcomeOK (nil when the
// app sent none); Error for OutcomeError, and for OutcomeUnknown it says
// why the outcome is not known (timeout, cancelled, the app exited).
type Result struct {
	Outcome Outcome
	Data    json.RawMessage
	Error   *Error
}

// ToolRelay receives the life of the calls handed to ToolCall: exactly one
// Acknowledged, then exactly one Finished, per accepted call. Its methods
// are called one at a time, in the order things happened (per app), with
// the relay locked and, but for the outcomes an install hands over, the
// app's peer (relay.go): they must not block
// (queue the event, or drop it for a client too slow) and must not call
// the Manager.
type ToolRelay interface {
	// Acknowledged: the call is in hand. confirm none: written to the
	// app; host: accepted, before any sheet; app: the app reported
	// awaiting_confirmation. A call that ends before that moment is
	// acknowledged just before it finishes.
	Acknowledged(app, callID string)
	// Finished: the call's outcome. Nothing about the call follows.
	Finished(app, callID string, r Result)
}

// toolCall accepts a call and places it in one step, the app's peer
// locked. accepted, when set, runs in between, and must not block: after
// it, nothing else of the call can come first (the relay's callbacks
// come from the placing, and the app, its sheet and its store hear of
// the call only once it is placed). ks is the kernel that hands the
// call over, nil for the tests' relay seam.
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
		// A kernel's call is checked again in its step: a detach that
		// came since has swept this peer already, and the kernel must
		// hear nothing after it (doc.go).
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

// toolCancel withdraws an outstanding call of ks (KernelSession.ToolCancel;
// nil: the tests' relay seam), which is checked again in the step, as
// toolCall does.
func (m *Manager) toolCancel(app, callID string, ks *KernelSession) error {
	err := ErrUnknownCall
	if p := m.peerOf(app); p != nil {
		p.run(func() {
			if err = ks.check(); err != nil {
				return
			}
			if p.link == nil || p.link.calls[callID] == nil {
				err = ErrUnknownCall
				return
			}
			c := p.link.calls[callID]
			p.endCall(c, callCancelled, failResult(c, frame.CodeCancelled, "the caller cancelled the call"), "cancelled")
		})
	}
	return err
}

// ContextOwner returns the account and client of one of app's open
// contexts. Another app's, a closed or a made-up id are ErrUnknownContext
// alike.
func (m *Manager) ContextOwner(app, contextID string) (control.ContextOwner, error) {
	var o control.ContextOwner
	err := refuse(ErrUnknownContext, "the app has no open context %s", contextID)
	if p := m.peerOf(app); p != nil {
		p.run(func() {
			if p.link == nil {
				return
			}
			if c := p.link.contexts[contextID]; c != nil {
				o, err = control.ContextOwner{Account: c.account, Client: c.client}, nil
			}
		})
	}
	return o, err
}

// Contexts lists app's open contexts, by id: what a kernel may name in a
// tool call (octosupctl call picks one).
func (m *Manager) Contexts(app string) []control.ContextInfo {
	out := []control.ContextInfo{}
	if p := m.peerOf(app); p != nil {
		p.run(func() {
			if p.link == nil {
				return
			}
			for _, c := range p.link.contexts {
				out = append(out, control.ContextInfo{ContextID: c.id, Account: c.account, Client: c.client})
			}
		})
	}
	slices.SortFunc(out, func(a, b control.ContextInfo) int { return strings.Compare(a.ContextID, b.ContextID) })
	return out
}

// CloseAccount signs app out of account: each of its contexts with that
// account closes (its calls cancelled first, tool_cancel each, then
// context_closed; the kernel gets context.closed). It returns how many
// contexts closed; an app without a process has none.
func (m *Manager) CloseAccount(app, account string) int {
	var closing []*appContext
	if p := m.peerOf(app); p != nil {
		p.run(func() {
			if p.link == nil {
				return
			}
			closing = sortedValues(p.link.contexts, func(c *appContext) bool { return c.account == account })
			for _, c := range closing {
				p.closeContext(c, "account_closed", true)
			}
		})
	}
	return len(closing)
}

// Audit returns the last limit finished calls of app ("" for all), oldest
// first, including the ones not yet on disk.
func (m *Manager) Audit(app string, limit int) ([]policy.AuditEntry, error) {
	if err := m.audit.flush(); err != nil {
		return nil, err
	}
	return m.store.Audit(app, limit)
}
