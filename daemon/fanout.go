package daemon

import (
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"

	"octosup/control"
	"octosup/internal/linewriter"
	"octosup/supervisor"
)

// fanout fans events out to streams. Publishing never blocks: a connection
// whose queue is full is dropped (closed), the daemon goes on.
//
// A stream becomes visible (joins the fanout) in the step that queues the
// answer that starts it (answerThen): every event it gets queues after
// that answer. The publisher takes the streams of a topic under mu, lets
// go, and only then puts the line on each connection: mu is never held
// while putting (a Then takes it under a connection's queue lock).
type fanout struct {
	mu      sync.RWMutex
	streams map[*stream]struct{}
}

// stream is one subscription of one connection: the topics it takes and,
// optionally, the one app it is about (logs with follow).
type stream struct {
	conn *Conn
	app  string // "" = every app
	// topics is replaced, never changed (copy on write), so that the
	// publisher reads it without a lock of the stream's.
	topics atomic.Pointer[map[string]bool]
	// mu guards covered: the Seq of the last log line the answer (its
	// snapshot and the catch-up queued with it) already holds; a line
	// numbered up to it is dropped. The supervisor's events reach the fanout
	// through a forwarder, so a line that was in the snapshot may still be
	// published after the stream joined.
	mu      sync.Mutex
	covered uint64
}

func newStream(c *Conn, app string, topics []string) *stream {
	st := &stream{conn: c, app: app}
	st.addTopics(topics)
	return st
}

func (h *fanout) add(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = make(map[*stream]struct{})
	}
	h.streams[st] = struct{}{}
}

// removeConn removes every stream of a connection.
func (h *fanout) removeConn(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		if st.conn == c {
			delete(h.streams, st)
		}
	}
}

// publish delivers one encoded event line to every stream of its topic;
// seq is a log line's Seq (0 for any other event).
func (h *fanout) publish(topic string, line []byte, seq uint64) {
	h.mu.RLock()
	var to []*stream
	var app string
	appKnown := false
	for st := range h.streams {
		if !(*st.topics.Load())[topic] {
			continue
		}
		if st.app != "" {
			if !appKnown {
				app, appKnown = eventApp(line), true
			}
			if app != st.app {
				continue
			}
		}
		to = append(to, st)
	}
	h.mu.RUnlock()
	for _, st := range to {
		if st.passes(seq) {
			st.conn.event(line)
		}
	}
}

// passes reports whether a log line numbered seq is new to the stream.
func (st *stream) passes(seq uint64) bool {
	if st.app == "" || seq == 0 {
		return true // only logs with follow cover lines
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return seq > st.covered
}

func (st *stream) addTopics(topics []string) {
	next := map[string]bool{}
	if cur := st.topics.Load(); cur != nil {
		for t := range *cur {
			next[t] = true
		}
	}
	for _, t := range topics {
		next[t] = true
	}
	st.topics.Store(&next)
}

func (st *stream) topicList() []string {
	cur := *st.topics.Load()
	out := make([]string, 0, len(cur))
	for t := range cur {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// joinThen is the Then of an answer that starts st: st joins the fanout in
// the step that queued the answer.
func (h *fanout) joinThen(st *stream) func(*linewriter.Queue) {
	return func(*linewriter.Queue) { h.add(st) }
}

// followThen is the Then of logs' answer with follow: st joins the fanout,
// and the lines of its app numbered after snapshot (the answer's lines)
// that the ring holds are queued after the answer, from the app's log
// ring (read by logs, which must not block: a ring is read under its own
// lock, which no one holds for long). Lines published after st joined
// and already queued here are dropped by their Seq.
func (h *fanout) followThen(st *stream, snapshot []supervisor.LogLine, logs func() []supervisor.LogLine) func(*linewriter.Queue) {
	var answered uint64
	if len(snapshot) > 0 {
		answered = snapshot[len(snapshot)-1].Seq
	}
	return func(q *linewriter.Queue) {
		st.mu.Lock()
		defer st.mu.Unlock()
		h.add(st)
		// Every line published before the add is in the ring by now: it
		// was added to the ring before it was published.
		ring := logs()
		st.covered = answered
		for _, l := range ring {
			if l.Seq <= answered {
				continue
			}
			if line, err := control.EncodeEvent(control.TopicLog, logLine(l)); err == nil {
				q.Put(line)
			}
			st.covered = l.Seq
		}
	}
}

// eventApp is the "app" member of an event line, "" when it has none.
func eventApp(line []byte) string {
	var probe struct {
		App string `json:"app"`
	}
	_ = json.Unmarshal(line, &probe)
	return probe.App
}
