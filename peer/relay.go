package peer

import (
	"slices"
	"sync"

	"go.uber.org/zap"
)

// relay hands each call's Acknowledged and Finished to the installed
// ToolRelay, or keeps them, in order, while none is. mu guards it and is
// held across the relay's callbacks, which only queue (ToolRelay): so
// the relay hears each app's outcomes in the order its peer made them
// (under the peer's mu, which is taken before this one), and an
// uninstalled relay hears nothing after its uninstall.
type relay struct {
	mu    sync.Mutex
	log   *zap.Logger
	to    ToolRelay
	owner *KernelSession // the session whose Kernel is the relay
	queue relayRing
}

type relayNote struct {
	app, callID string
	finished    bool
	r           Result
}

// note hands a callback to the relay, or keeps it while none is
// installed.
func (rl *relay) note(n relayNote) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.to != nil {
		rl.deliver(n)
	} else {
		rl.queue.push(n)
	}
}

// install sets the relay (nil: none) and drains what was kept into it.
// It returns how many outcomes were lost while none was installed, for
// the caller to log once it holds no lock. mu is held.
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

// relayQueueBytes bounds the bytes of the relay callbacks kept while no
// relay is installed: half of what a control connection holds unread (16
// MiB), so that the next kernel's attach, which queues them all behind
// its answer in one step that does not wait, fits its connection.
const relayQueueBytes = 8 << 20

// relayRing is the bounded queue of relay callbacks kept while no relay
// is installed: past size callbacks or relayQueueBytes bytes a callback
// goes, and is counted. The one that goes is the oldest of the app that
// holds the most of the queue (callbacks, or bytes, whichever bound is
// reached): an app that fills the queue while no kernel listens loses its
// own outcomes, not its neighbours'.
type relayRing struct {
	size    int
	buf     []relayNote
	bytes   int
	dropped int
	held    map[string]relayHeld // what each app has in buf
}

type relayHeld struct{ notes, bytes int }

// noteBytes is about what a callback's event line takes as the kernel's
// connection writes it: its result counted as written (resultLen), each
// <, > and & as six bytes.
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

// evict drops the oldest callback of the app that holds the most
// callbacks (byNotes) or bytes: of two that hold as much, app's (the one
// pushing), else the one whose oldest callback came first.
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
