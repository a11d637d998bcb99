package daemon

import (
	"maps"
	"sync"
	"sync/atomic"
)

// fanout is the set of streams; mu is never held while putting.
type fanout struct {
	mu      sync.RWMutex
	streams map[*stream]struct{}
}

// stream is one subscription of one connection: its topics and,
// for logs with follow, its one app.
type stream struct {
	conn *Conn
	app  string // "" = every app
	// topics is copied on write: the publisher reads it without a lock.
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
	h.streams[st] = struct{}{}
}

func (h *fanout) removeConn(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		if st.conn == c {
			delete(h.streams, st)
		}
	}
}

// takers are topic's streams for an event about app ("" none); a
// one-app stream takes only its app's.
func (h *fanout) takers(topic, app string) []*stream {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var to []*stream
	for st := range h.streams {
		if (*st.topics.Load())[topic] && (st.app == "" || st.app == app) {
			to = append(to, st)
		}
	}
	return to
}

func (st *stream) addTopics(topics []string) {
	next := st.union(topics)
	st.topics.Store(&next)
}

func (st *stream) union(more []string) map[string]bool {
	set := map[string]bool{}
	if cur := st.topics.Load(); cur != nil {
		maps.Copy(set, *cur)
	}
	for _, t := range more {
		set[t] = true
	}
	return set
}
