package daemon

import (
	"context"
	"sync"
)

// published is how far the server has published each app's state events,
// by the supervisor's numbering of its moves (supervisor.AppStatus.Seq).
// A lifecycle op's answer waits until the event of the state it answers
// was published: on a connection subscribed to state that event then
// comes before the answer, every time (docs/control.md, "Order"), whatever
// the wall clock did.
type published struct {
	mu    sync.Mutex
	seq   map[string]uint64 // the Seq of the app's last published state
	moved chan struct{}     // closed, and replaced, at each note and at end
	ended bool              // the supervisor's events ended: nothing more comes
}

// note records that the state event of app's move seq was published
// (queued on every subscribed connection).
func (p *published) note(app string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seq == nil {
		p.seq = map[string]uint64{}
	}
	if seq > p.seq[app] {
		p.seq[app] = seq
	}
	p.wakeLocked()
}

// end says no event will be published any more (the supervisor shut
// down): every wait returns.
func (p *published) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.wakeLocked()
}

func (p *published) wakeLocked() {
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}

// wait returns true once the state of app's move seq, or a later one, was
// published; false when ctx ended or the events ended first.
func (p *published) wait(ctx context.Context, app string, seq uint64) bool {
	for {
		p.mu.Lock()
		if p.seq[app] >= seq {
			p.mu.Unlock()
			return true
		}
		if p.ended {
			p.mu.Unlock()
			return false
		}
		if p.moved == nil {
			p.moved = make(chan struct{})
		}
		moved := p.moved
		p.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		}
	}
}
