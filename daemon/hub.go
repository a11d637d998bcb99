package daemon

import (
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"octosup/control"
	"octosup/internal/linewriter"
	"octosup/supervisor"
)

// hub fans events out to streams. Publishing never blocks: a connection
// whose queue is full is dropped (closed), the daemon goes on.
//
// A stream becomes visible (joins the hub) in the step that queues the
// answer that starts it (answerThen): every event it gets queues after
// that answer. The publisher takes the streams of a topic under mu, lets
// go, and only then puts the line on each connection: mu is never held
// while putting (a Then takes it under a connection's queue lock).
type hub struct {
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
	// mu guards skip: the log lines the answer (its snapshot and the
	// catch-up queued with it) already covered, which are dropped until
	// the first one it passes; nil: none. The supervisor's events reach
	// the hub through a forwarder, so a line that was in the snapshot may
	// still be published after the stream joined.
	mu   sync.Mutex
	skip *coverage
}

func newStream(c *Conn, app string, topics []string) *stream {
	st := &stream{conn: c, app: app}
	st.addTopics(topics)
	return st
}

func (h *hub) add(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = make(map[*stream]struct{})
	}
	h.streams[st] = struct{}{}
}

// removeConn removes every stream of a connection.
func (h *hub) removeConn(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		if st.conn == c {
			delete(h.streams, st)
		}
	}
}

// publish delivers one encoded event line to every stream of its topic.
func (h *hub) publish(topic string, line []byte) {
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
		if st.passes(line) {
			st.conn.event(line)
		}
	}
}

// passes applies the stream's skip to a line.
func (st *stream) passes(line []byte) bool {
	if st.app == "" {
		return true // skip is for logs with follow only
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.skip == nil {
		return true
	}
	var l control.LogLine
	if json.Unmarshal(line, &l) != nil {
		return false
	}
	if st.skip.covers(l) {
		return false
	}
	st.skip = nil // lines of one app arrive in order: the rest are new
	return true
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

// joinThen is the Then of an answer that starts st: st joins the hub in
// the step that queued the answer.
func (h *hub) joinThen(st *stream) func(*linewriter.Queue) {
	return func(*linewriter.Queue) { h.add(st) }
}

// followThen is the Then of logs' answer with follow: st joins the hub,
// and the lines of its app that were published before it joined but
// after snapshot (the answer's lines) are queued after the answer, from
// the app's log ring (read by logs, which must not block: a ring is read
// under its own lock, which no one holds while putting a line). Lines
// published after st joined and already queued here are skipped.
func (h *hub) followThen(st *stream, snapshot []supervisor.LogLine, logs func() []supervisor.LogLine) func(*linewriter.Queue) {
	return func(q *linewriter.Queue) {
		st.mu.Lock()
		defer st.mu.Unlock()
		h.add(st)
		// Every line published before the add is in the ring by now: it
		// was added to the ring before it was published.
		ring := logs()
		answered := newCoverage(snapshot)
		for _, l := range ring {
			if answered.covers(logLine(l)) {
				continue
			}
			if line, err := control.EncodeEvent(control.TopicLog, logLine(l)); err == nil {
				q.Put(line)
			}
		}
		st.skip = newCoverage(ring)
	}
}

// coverage is what a list of log lines covers: an event is new unless
// the list has it, older than its last line, or as old and one of its
// lines of that instant (lines may share a timestamp on a coarse clock).
type coverage struct {
	last        time.Time
	sameInstant map[string]int
}

func newCoverage(lines []supervisor.LogLine) *coverage {
	c := &coverage{sameInstant: map[string]int{}}
	if len(lines) > 0 {
		c.last = lines[len(lines)-1].At
		for _, l := range lines {
			if l.At.Equal(c.last) {
				c.sameInstant[l.Stream+"\x00"+l.Text]++
			}
		}
	}
	return c
}

// covers reports whether l is one of the lines covered (each of the last
// instant's lines covers one event).
func (c *coverage) covers(l control.LogLine) bool {
	switch {
	case l.At.After(c.last):
		return false
	case l.At.Equal(c.last) && c.sameInstant[l.Stream+"\x00"+l.Text] > 0:
		c.sameInstant[l.Stream+"\x00"+l.Text]--
		return true
	default:
		return l.At.Before(c.last)
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
