package peer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// streamLog is what one app saw, per req_id.
type streamLog struct {
	mu      sync.Mutex
	replies map[string]int
	okStart map[string]bool // turn.start replied ok: events may follow
	ended   map[string]bool // its turn.end came
	bad     []string
	opened  chan string // context ids from session.open replies
}

func (s *streamLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.replies)
}

// TestRandomizedExactlyOneReply drives several apps with random requests
// against a kernel that answers, fails, streams or ignores at random, and
// detaches and comes back midway; every request must get exactly one
// reply, and events only between a turn's ok reply and its turn.end.
func TestRandomizedExactlyOneReply(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KernelTimeout = 100 * time.Millisecond })
	const apps, perApp = 4, 400
	var testApps []*testApp
	for i := range apps {
		a := h.attach(notesApp(fmt.Sprintf("app%d", i)))
		h.grant(a)
		testApps = append(testApps, a)
	}

	k := newFakeKernel()
	var ksMu sync.Mutex
	ks, err := h.m.AttachKernel(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	session := func() *KernelSession { ksMu.Lock(); defer ksMu.Unlock(); return ks }
	stop := make(chan struct{})
	kernelDone := make(chan struct{})
	go func() { // the kernel
		defer close(kernelDone)
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			var r KernelRequest
			select {
			case r = <-k.requests:
			case <-stop:
				return
			}
			s := session()
			switch n := rng.IntN(10); {
			case n < 2:
				s.Reply(KernelReply{App: r.App, ReqID: r.ReqID, Error: &Error{Code: frame.CodeInternal, Message: "kernel says no"}})
			case n < 3:
				// ignored: the daemon's deadline answers it
			case r.Method == policy.MethodTurnInterrupt:
				s.Reply(KernelReply{App: r.App, ReqID: r.ReqID, OK: true})
			default:
				s.Reply(KernelReply{App: r.App, ReqID: r.ReqID, OK: true, Data: json.RawMessage(`{"turn_id":"` + r.ReqID + `"}`)})
				for i := range rng.IntN(4) {
					s.Event(KernelEvent{App: r.App, ReqID: r.ReqID, Event: json.RawMessage(fmt.Sprintf(`{"type":"text","n":%d}`, i))})
				}
				if rng.IntN(4) > 0 {
					s.Event(KernelEvent{App: r.App, ReqID: r.ReqID, Event: json.RawMessage(`{"type":"turn.end","turn_id":"` + r.ReqID + `","reason":"completed"}`)})
				}
			}
		}
	}()

	logs := make([]*streamLog, apps)
	var readers sync.WaitGroup
	for i, a := range testApps {
		l := &streamLog{replies: map[string]int{}, okStart: map[string]bool{}, ended: map[string]bool{}, opened: make(chan string, perApp)}
		logs[i] = l
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				line, err := a.r.Next()
				if err != nil {
					return
				}
				d, err := decodeDown(line)
				l.mu.Lock()
				switch f := d.(type) {
				case *frame.Reply:
					l.replies[f.ReqID]++
					if l.replies[f.ReqID] > 1 {
						l.bad = append(l.bad, "second reply to "+f.ReqID)
					}
					if f.OK && len(f.Data) > 0 && string(f.Data) != "{}" {
						var v struct {
							TurnID    string `json:"turn_id"`
							ContextID string `json:"context_id"`
						}
						json.Unmarshal(f.Data, &v)
						if v.TurnID != "" {
							l.okStart[f.ReqID] = true
						}
						if v.ContextID != "" {
							l.opened <- v.ContextID
						}
					}
				case *frame.Event:
					if !l.okStart[f.ReqID] || l.ended[f.ReqID] {
						l.bad = append(l.bad, fmt.Sprintf("event for %s outside its stream: %s", f.ReqID, f.Event))
					}
					if isTurnEnd(f.Event) {
						l.ended[f.ReqID] = true
					}
				case *frame.ContextClosed:
				default:
					l.bad = append(l.bad, fmt.Sprintf("unexpected %q (%v)", line, err))
				}
				l.mu.Unlock()
			}
		}()
	}

	var writers sync.WaitGroup
	for i, a := range testApps {
		l := logs[i]
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var ctxs []string // contexts this app opened, as far as it knows
			send := func(id, method string, args any) {
				b, _ := json.Marshal(args)
				line, _ := encodeUp(&frame.Request{ReqID: id, Method: method, Args: b})
				a.conn.Write(line)
			}
			for n := range perApp {
				id := fmt.Sprintf("q%d", n)
				pick := func() string {
					if len(ctxs) == 0 || rng.IntN(10) == 0 {
						return "n0nce-999999" // made up
					}
					return ctxs[rng.IntN(len(ctxs))]
				}
				switch c := rng.IntN(20); {
				case c < 2 || len(ctxs) == 0:
					send(id, policy.MethodSessionOpen, map[string]any{"title": fmt.Sprint("t", rng.IntN(3))})
					select {
					case c := <-l.opened:
						ctxs = append(ctxs, c)
					case <-time.After(wait):
						return // the reply check below reports it
					}
				case c < 12:
					send(id, policy.MethodTurnStart, map[string]any{"context_id": pick(), "input": n})
				case c < 15:
					send(id, policy.MethodTurnInterrupt, map[string]any{"context_id": pick(), "turn_id": fmt.Sprintf("q%d", rng.IntN(n+1))})
				case c < 17:
					send(id, policy.MethodSessionHistory, map[string]any{"context_id": pick()})
				default:
					send(id, policy.MethodContextClose, map[string]any{"context_id": pick()})
				}
			}
		}()
	}

	// Midway, the kernel goes away and comes back.
	until(t, "some traffic", func() bool { return logs[0].count() > perApp/3 })
	ksMu.Lock()
	ks.Detach()
	ks, err = h.m.AttachKernel(k, nil)
	ksMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	writers.Wait()
	for i, l := range logs {
		until(t, fmt.Sprintf("app%d's %d replies", i, perApp), func() bool { return l.count() == perApp })
	}
	close(stop)
	<-kernelDone
	session().Detach()
	for _, a := range testApps {
		a.conn.Close()
	}
	readers.Wait()
	var ok, ended int
	for _, l := range logs {
		ok += len(l.okStart)
		ended += len(l.ended)
	}
	t.Logf("%d requests, %d turns streamed, %d ended", apps*perApp, ok, ended)
	for i, l := range logs {
		for _, b := range l.bad {
			t.Errorf("app%d: %s", i, b)
		}
		for n := range perApp {
			if got := l.replies[fmt.Sprintf("q%d", n)]; got != 1 {
				t.Errorf("app%d q%d: %d replies", i, n, got)
			}
		}
	}
}
