package peer

import (
	"slices"
	"sync"
	"time"
)

// RecordingToolRelay is the test double of ToolRelay, exported for the
// tests of the packages that drive a Manager (the daemon's too): it
// records every callback in order. The zero value is ready; it is safe
// for concurrent use. Nothing in production installs it.
type RecordingToolRelay struct {
	mu      sync.Mutex
	events  []RelayEvent
	changed chan struct{} // closed and replaced at each record
}

// RelayEvent is one recorded callback: Finished is nil for Acknowledged.
type RelayEvent struct {
	App      string
	CallID   string
	Finished *Result
}

// String is "ack APP CALL" or "fin APP CALL OUTCOME [CODE] [DATA]", the
// form the tests compare.
func (e RelayEvent) String() string {
	if e.Finished == nil {
		return "ack " + e.App + " " + e.CallID
	}
	s := "fin " + e.App + " " + e.CallID + " " + e.Finished.Outcome.String()
	if e.Finished.Error != nil {
		s += " " + e.Finished.Error.Code
	}
	if e.Finished.Outcome == OutcomeOK && e.Finished.Data != nil {
		s += " " + string(e.Finished.Data)
	}
	return s
}

func (r *RecordingToolRelay) add(e RelayEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Acknowledged records an acknowledgement.
func (r *RecordingToolRelay) Acknowledged(app, callID string) {
	r.add(RelayEvent{App: app, CallID: callID})
}

// Finished records an outcome.
func (r *RecordingToolRelay) Finished(app, callID string, res Result) {
	r.add(RelayEvent{App: app, CallID: callID, Finished: &res})
}

// Events returns what was recorded so far, in order.
func (r *RecordingToolRelay) Events() []RelayEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// WaitFor blocks until at least n events were recorded or timeout
// passed, and returns what was recorded by then.
func (r *RecordingToolRelay) WaitFor(n int, timeout time.Duration) []RelayEvent {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		if len(r.events) >= n {
			out := slices.Clone(r.events)
			r.mu.Unlock()
			return out
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return r.Events()
		}
	}
}
