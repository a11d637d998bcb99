package daemon

import (
	"context"
	"sync"
	"time"
)

// publishWait bounds how long a lifecycle op's answer waits for the state
// event it answers to be published: the supervisor publishes every move,
// so the wait ends at once but when the daemon is shutting down.
const publishWait = 5 * time.Second

// published is how far the server has published each app's state events.
// A lifecycle op's answer waits until the event of the state it answers
// was published: on a connection subscribed to state that event then
// comes before the answer, every time (docs/control.md, "Order").
type published struct {
	mu    sync.Mutex
	since map[string]time.Time // the Since of the app's last published state
	moved chan struct{}        // closed, and replaced, at each note
}

// note records that the state event of app that began at since was
// published (queued on every subscribed connection).
func (p *published) note(app string, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.since == nil {
		p.since = map[string]time.Time{}
	}
	if since.After(p.since[app]) {
		p.since[app] = since
	}
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}

// wait returns once the state of app that began at since, or a later one,
// was published; false when ctx ended or publishWait passed first.
func (p *published) wait(ctx context.Context, app string, since time.Time) bool {
	var timeout <-chan time.Time
	for {
		p.mu.Lock()
		if !p.since[app].Before(since) {
			p.mu.Unlock()
			return true
		}
		if p.moved == nil {
			p.moved = make(chan struct{})
		}
		moved := p.moved
		p.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(publishWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		case <-timeout:
			return false
		}
	}
}
