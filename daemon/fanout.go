package daemon

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// fanout fans events out to streams. Publishing never blocks: a connection
// whose queue is full is dropped (closed), the daemon goes on.
//
// A stream joins the fanout in the step that queues the answer that
// starts it, after the answer (answerAt): every event it gets queues
// after that answer. The publisher takes the streams of a topic under mu,
// lets go, and only then puts the line on each connection: mu is never
// held while putting.
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

// publish delivers one encoded event line to every stream of its topic.
func (h *fanout) publish(topic string, line []byte) {
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
		st.conn.event(line)
	}
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

// with is the sorted list of the stream's topics and more.
func (st *stream) with(more []string) []string {
	set := map[string]bool{}
	if cur := st.topics.Load(); cur != nil {
		maps.Copy(set, *cur)
	}
	for _, t := range more {
		set[t] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// eventApp is the "app" member of an event line, "" when it has none.
func eventApp(line []byte) string {
	var probe struct {
		App string `json:"app"`
	}
	_ = json.Unmarshal(line, &probe)
	return probe.App
}
