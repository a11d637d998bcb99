package pulsefilter

import (
	"context"
	"sync"
)

// MaxUnanswered bounds a connection's commands the server has not yet
// answered: past it the filter reads nothing more of the app until an
// answer comes. Each command gets its answer (a REPLY, or an ERROR, with
// its tag) queued in the server until the client reads it, and neither
// server bounds that queue: a hostile review's app sent 3,000
// GET_CLIENT_INFO_LIST it never read the answers to, and PulseAudio grew
// from 11 MB to 2.65 GB (pipewire-pulse to 1.78 GB with 2,000). Bounded,
// an app that does not read has the server hold a few dozen answers, its
// socket's buffers full. libpulse waits for most of its commands'
// answers; a client that keeps more than a few waiting at once (a
// stream's latency queries, a few lookups) is far below 32.
const MaxUnanswered = 32

// answers counts a connection's commands that wait for their answers,
// by tag. Every command on the allow-list is answered once by either
// server, under its tag: at once, or (a create in pipewire-pulse, a
// PLAY_SAMPLE, a DRAIN_PLAYBACK_STREAM when the stream has drained)
// later; a command the server cannot parse ends the connection. The
// exceptions hold their place until the connection ends: a drain that
// another drain of the same stream replaced (both servers answer only the
// latest), in pipewire-pulse 0.3 a drain whose stream is deleted first or
// whose tag is 0, and a SET_CLIENT_NAME sent again before the first is
// answered; and whatever a server's bug leaves unanswered. Past the bound
// they stall that connection only: its app's others, and other apps, go
// on. An answer whose tag no command waits with (one to a command the
// filter did not count, none of the app's) counts for nothing: only the
// server answers, so the count never falls below what waits in it.
//
// Memory blocks (a stream's audio) are not commands and are not counted.
type answers struct {
	mu      sync.Mutex
	waiting map[uint32]int // commands not answered, by tag (an app may reuse one)
	n       int            // the sum of waiting
	bound   int
	// more has a token when an answer came since the filter last looked:
	// the filter's half is the only one that waits on it.
	more chan struct{}
}

func newAnswers(bound int) *answers {
	return &answers{waiting: map[uint32]int{}, bound: bound, more: make(chan struct{}, 1)}
}

// wait counts a command with tag as waiting for its answer, once fewer
// than the bound wait: until then it waits for an answer, holding no
// lock, and is ctx's error if ctx ends first.
func (a *answers) wait(ctx context.Context, tag uint32) error {
	for {
		a.mu.Lock()
		if a.n < a.bound {
			a.waiting[tag]++
			a.n++
			a.mu.Unlock()
			return nil
		}
		a.mu.Unlock()
		select {
		case <-a.more:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// answered forgets a command with tag that waits, if there is one.
func (a *answers) answered(tag uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting[tag] == 0 {
		return
	}
	if a.waiting[tag]--; a.waiting[tag] == 0 {
		delete(a.waiting, tag)
	}
	a.n--
	select {
	case a.more <- struct{}{}:
	default:
	}
}
