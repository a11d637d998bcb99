package supervisor

import "sync"

// defaultSubscriberBuffer is the queue of a subscriber that asked for none.
const defaultSubscriberBuffer = 64

// EventKind is what an Event is about.
type EventKind string

const (
	// KindState: an app's state changed (Event.State is set).
	KindState EventKind = "state"
	// KindLog: an app printed a line (Event.Log is set).
	KindLog EventKind = "log"
	// KindWarning: an app ran into one of its limits (Event.Warning says
	// which, Event.State is its status then); once per episode.
	KindWarning EventKind = "warning"
)

// Event is one thing that happened: a state change of an app (Kind
// KindState, State set), a line of its output (Kind KindLog, Log set) or
// a limit it reached (Kind KindWarning, State and Warning set).
type Event struct {
	Kind    EventKind
	State   *AppStatus
	Log     *LogLine
	Warning string
}

// Subscription receives the supervisor's events on a bounded queue. A
// subscriber that lets its queue fill is dropped, never waited for: its
// Events channel is closed, Done is closed and Err is ErrSlowSubscriber.
type Subscription struct {
	hub   *subscribers
	ch    chan Event
	done  chan struct{}
	kinds map[EventKind]bool // nil: every kind

	// err and ended are guarded by hub.mu.
	err   error
	ended bool
}

// Events is the queue; it is closed when the subscription ends.
func (sub *Subscription) Events() <-chan Event { return sub.ch }

// Done is closed when the subscription ends, for whatever reason.
func (sub *Subscription) Done() <-chan struct{} { return sub.done }

// Err says why the subscription ended: nil after Close, ErrSlowSubscriber
// when its queue filled, ErrShutdown when the supervisor stopped.
func (sub *Subscription) Err() error {
	sub.hub.mu.Lock()
	defer sub.hub.mu.Unlock()
	return sub.err
}

// Close ends the subscription. It is safe to call more than once.
func (sub *Subscription) Close() {
	sub.hub.mu.Lock()
	defer sub.hub.mu.Unlock()
	sub.hub.endLocked(sub, nil)
}

// subscribers is the set of live subscriptions. Publishing never blocks:
// a send that would block drops that subscriber instead.
type subscribers struct {
	mu     sync.Mutex
	set    map[*Subscription]struct{}
	closed error // once set, new subscriptions end at once with it
}

func (h *subscribers) subscribe(buffer int, kinds []EventKind) *Subscription {
	if buffer <= 0 {
		buffer = defaultSubscriberBuffer
	}
	sub := &Subscription{hub: h, ch: make(chan Event, buffer), done: make(chan struct{})}
	if len(kinds) > 0 {
		sub.kinds = make(map[EventKind]bool, len(kinds))
		for _, k := range kinds {
			sub.kinds[k] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed != nil {
		h.endLocked(sub, h.closed)
		return sub
	}
	if h.set == nil {
		h.set = make(map[*Subscription]struct{})
	}
	h.set[sub] = struct{}{}
	return sub
}

// publish sends ev to every subscriber of its kind and returns how many
// it dropped, for the caller to log once it holds no lock.
func (h *subscribers) publish(ev Event) (dropped int) {
	h.mu.Lock()
	for sub := range h.set {
		if sub.kinds != nil && !sub.kinds[ev.Kind] {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			h.endLocked(sub, ErrSlowSubscriber)
			dropped++
		}
	}
	h.mu.Unlock()
	return dropped
}

// closeAll ends every subscription with err, and every later one too.
func (h *subscribers) closeAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = err
	for sub := range h.set {
		h.endLocked(sub, err)
	}
}

func (h *subscribers) endLocked(sub *Subscription, err error) {
	if sub.ended {
		return
	}
	sub.ended = true
	sub.err = err
	delete(h.set, sub)
	close(sub.ch)
	close(sub.done)
}
