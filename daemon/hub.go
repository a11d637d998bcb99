package daemon

import (
	"encoding/json"
	"sort"
	"sync"
)

// pendingCap bounds the events a stream holds between its subscription
// and its answer (see stream.activate).
const pendingCap = 1024

// hub fans events out to streams. Publishing never blocks: a connection
// whose queue is full is dropped (closed), the daemon goes on.
type hub struct {
	mu      sync.RWMutex
	streams map[*stream]struct{}
}

// stream is one subscription of one connection: the topics it takes and,
// optionally, the one app it is about.
type stream struct {
	conn   *Conn
	app    string // "" = every app
	mu     sync.Mutex
	topics map[string]bool
	active bool     // false until its answer is queued
	held   [][]byte // events that came before activation
	// skip drops the events its answer already covered (nil: none). The
	// supervisor's events reach the hub through a forwarder, so one
	// written before the answer's snapshot may still arrive after
	// activation: skip stays until the first event it passes.
	skip func(line []byte) bool
}

func (h *hub) add(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = make(map[*stream]struct{})
	}
	h.streams[st] = struct{}{}
}

func (h *hub) remove(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.streams, st)
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
	defer h.mu.RUnlock()
	var app string
	appKnown := false
	for st := range h.streams {
		if !st.takes(topic) {
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
		st.deliver(line)
	}
}

func (st *stream) takes(topic string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.topics[topic]
}

func (st *stream) addTopics(topics []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, t := range topics {
		st.topics[t] = true
	}
}

func (st *stream) deliver(line []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.active {
		if len(st.held) >= pendingCap {
			st.conn.drop("too many events before the stream started")
			return
		}
		st.held = append(st.held, line)
		return
	}
	st.send(line)
}

// send writes an event past skip. st.mu is held.
func (st *stream) send(line []byte) {
	if st.skip != nil {
		if st.skip(line) {
			return
		}
		st.skip = nil // events of one app arrive in order: the rest are new
	}
	st.conn.sendEvent(line)
}

// activate sends the held events that keep passes (nil: all) and lets
// later ones through, dropping those keep refuses until it passes one. It
// runs after the stream's answer was queued, so events always follow the
// answer that started them.
func (st *stream) activate(keep func(line []byte) bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if keep != nil {
		st.skip = func(line []byte) bool { return !keep(line) }
	}
	for _, line := range st.held {
		st.send(line)
	}
	st.held = nil
	st.active = true
}

// eventApp is the "app" member of an event line, "" when it has none.
func eventApp(line []byte) string {
	var probe struct {
		App string `json:"app"`
	}
	_ = json.Unmarshal(line, &probe)
	return probe.App
}

func (st *stream) topicList() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]string, 0, len(st.topics))
	for t := range st.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
