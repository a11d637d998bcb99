package peer

import (
	"slices"
	"sync"

	"go.uber.org/zap"
)

// relay hands each call's Acknowledged and Finished to the installed
// ToolRelay, or keeps them in order while none is. mu is held across the
// callbacks: the relay hears each app's outcomes in its peer's order, and
// nothing after its uninstall.
type relay struct {
	mu    sync.Mutex
	log   *zap.Logger
	to    ToolRelay
	owner *KernelSession // whose Kernel is the relay
	queue relayRing
}

type relayNote struct {
	app, callID string
	finished    bool
	r           Result
}

func (rl *relay) note(n relayNote) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.to != nil {
		rl.deliver(n)
	} else {
		rl.queue.push(n)
	}
}

// install sets the relay (nil: none) and drains the backlog into it. It
// returns how many were dropped meanwhile, for the caller to log with no
// lock held. mu is held.
func (rl *relay) install(r ToolRelay, owner *KernelSession) (dropped int) {
	rl.to, rl.owner = r, owner
	if r == nil {
		return 0
	}
	for _, n := range rl.queue.buf {
		rl.deliver(n)
	}
	dropped = rl.queue.dropped
	rl.queue = relayRing{size: rl.queue.size} // a backlog's array is not kept
	return dropped
}

func (rl *relay) logDropped(n int) {
	if n > 0 {
		rl.log.Error("tool outcomes were lost while no relay was installed", zap.Int("dropped", n))
	}
}

func (rl *relay) deliver(n relayNote) {
	if n.finished {
		rl.to.Finished(n.app, n.callID, n.r)
	} else {
		rl.to.Acknowledged(n.app, n.callID)
	}
}

// relayQueueBytes bounds the backlog: half of what a control connection
// holds unread (16 MiB), so the next attach, which queues it all behind
// its answer without waiting, fits its connection.
const relayQueueBytes = 8 << 20

// relayRing is the backlog, bounded by size callbacks and relayQueueBytes.
// Past a bound it drops (and counts) the oldest callback of the app
// holding the most by that bound: an app that fills it while no kernel
// listens loses its own outcomes, not its neighbours'.
type relayRing struct {
	size    int
	buf     []relayNote
	bytes   int
	dropped int
	held    map[string]relayHeld // each app's share of buf
}

type relayHeld struct{ notes, bytes int }

// noteBytes is about a callback's event line on the kernel's connection
// (resultLen: each <, > and & as six bytes).
func noteBytes(n relayNote) int {
	return 128 + len(n.app) + len(n.callID) + resultLen(n.r)
}

func (q *relayRing) push(n relayNote) {
	nb := noteBytes(n)
	for len(q.buf) > 0 && (len(q.buf) >= q.size || q.bytes+nb > relayQueueBytes) {
		q.evict(n.app, len(q.buf) >= q.size)
	}
	if q.held == nil {
		q.held = make(map[string]relayHeld)
	}
	q.buf = append(q.buf, n)
	q.bytes += nb
	h := q.held[n.app]
	q.held[n.app] = relayHeld{h.notes + 1, h.bytes + nb}
}

// evict drops the oldest callback of the app holding the most callbacks
// (byNotes) or bytes; on a tie, app's (the pusher's), else the one whose
// oldest came first.
func (q *relayRing) evict(app string, byNotes bool) {
	share := func(app string) int {
		if byNotes {
			return q.held[app].notes
		}
		return q.held[app].bytes
	}
	hog, most := -1, -1
	for i, n := range q.buf {
		if v := share(n.app); v > most || (v == most && n.app == app && q.buf[hog].app != app) {
			hog, most = i, v
		}
	}
	n := q.buf[hog]
	nb := noteBytes(n)
	q.buf = slices.Delete(q.buf, hog, hog+1)
	q.bytes -= nb
	q.dropped++
	if h := q.held[n.app]; h.notes == 1 {
		delete(q.held, n.app)
	} else {
		q.held[n.app] = relayHeld{h.notes - 1, h.bytes - nb}
	}
}
