package supervisor

import (
	"errors"
	"sync"
	"testing"
)

// The tests watch a supervisor's events through subscriptions: each
// test supervisor's Config.Publish feeds a hub of its own (withEvents),
// and Subscribe takes a bounded queue from it. The daemon has no such
// hub: Publish is its one way to hear of events.

// hubs maps each test supervisor to its hub (withEvents, started).
var hubs sync.Map // *Supervisor → *subscribers

// defaultSubscriberBuffer is the queue of a subscriber that asked for none.
const defaultSubscriberBuffer = 64

// errSlowSubscriber: a subscription was dropped because its queue filled.
var errSlowSubscriber = errors.New("subscriber too slow: its event queue filled and it was dropped")

// withEvents has cfg's Publish (after any of its own) feed a new hub,
// which started registers for the supervisor made of cfg.
func withEvents(cfg *Config) *subscribers {
	h := &subscribers{}
	own := cfg.Publish
	cfg.Publish = func(ev Event) {
		if own != nil {
			own(ev)
		}
		h.publish(ev)
	}
	return h
}

// started registers h as sup's hub until the test ends, when its
// subscriptions end with ErrShutdown.
func started(t testing.TB, sup *Supervisor, h *subscribers) {
	hubs.Store(sup, h)
	t.Cleanup(func() {
		h.closeAll(ErrShutdown)
		hubs.Delete(sup)
	})
}

// Subscribe returns a subscription to the events of the given kinds (all
// kinds when none is given) with a queue of buffer events (64 when
// buffer <= 0).
func (s *Supervisor) Subscribe(buffer int, kinds ...EventKind) *Subscription {
	h, ok := hubs.Load(s)
	if !ok {
		panic("Subscribe on a supervisor the test did not make withEvents")
	}
	return h.(*subscribers).subscribe(buffer, kinds)
}

// Subscription receives the supervisor's events on a bounded queue. A
// subscriber that lets its queue fill is dropped, never waited for: its
// Events channel is closed, Done is closed and Err is errSlowSubscriber.
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

// Err says why the subscription ended: nil after Close, errSlowSubscriber
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
			h.endLocked(sub, errSlowSubscriber)
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
