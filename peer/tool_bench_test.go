package peer

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"octosup/internal/roundtrip"
	"octosup/peer/internal/frame"
)

// chanRelay hands each Finished to a channel (the benchmark's kernel).
type chanRelay struct{ done chan string }

func (chanRelay) Acknowledged(string, string) {}
func (r chanRelay) Finished(_, id string, res Result) {
	if res.Outcome != OutcomeOK {
		panic("benchmark call failed: " + res.Error.Error())
	}
	r.done <- id
}

// echoApp answers every tool_call ok at once, one write per result.
func echoApp(a *testApp) (stop func()) {
	done := roundtrip.AnswerToolCalls(a.conn, a.r.Next)
	return func() { a.conn.Close(); <-done }
}

// BenchmarkToolCall measures a tool call's round trip through the peer
// link (relay -> daemon -> app -> daemon -> relay) with 1 and 64 calls in
// flight, and, in the same run, the floor: one JSON line each way over a
// raw socketpair (decoded and re-encoded by the far end), 1 and 64 in
// flight. Each reports p50 (µs) and ops/s.
func BenchmarkToolCall(b *testing.B) {
	for _, inflight := range []int{1, 64} {
		b.Run("peer/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			h := newHarness(b, nil)
			a, ctx := h.toolApp(toolEntry("notes"))
			relay := chanRelay{done: make(chan string, 1024)}
			h.m.SetToolRelay(relay)
			defer echoApp(a)()
			call := KernelToolCall{Name: "notes.search", Args: json.RawMessage(`{"query":"milk"}`),
				Risk: RiskRead, TimeoutMS: 60000, ContextID: ctx, Caller: "bench"}
			n := 0
			send := func() {
				n++
				call.CallID = "b" + strconv.Itoa(n)
				if err := h.m.ToolCall("notes", call); err != nil {
					b.Fatal(err)
				}
			}
			roundtrip.Measure(b, inflight, send, func() { <-relay.done })
		})
	}
	for _, inflight := range []int{1, 64} {
		b.Run("raw-echo/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			conns := roundtrip.Socketpair(b)
			done := roundtrip.EchoJSON(conns[1], frame.NewReader(conns[1], frame.MaxFrame).Next)
			defer func() { conns[0].Close(); <-done; conns[1].Close() }()
			line, _ := frame.EncodeDown(&frame.ToolCall{CallID: "b1", Name: "notes.search", Args: json.RawMessage(`{"query":"milk"}`),
				Risk: RiskRead, TimeoutMS: 60000, Account: "personal", ContextID: "n0nce-2", Client: "notes", Caller: "bench"})
			r := frame.NewReader(conns[0], frame.MaxFrame)
			var wmu sync.Mutex
			send := func() {
				wmu.Lock()
				defer wmu.Unlock()
				if _, err := conns[0].Write(line); err != nil {
					b.Fatal(err)
				}
			}
			recv := func() {
				got, err := r.Next()
				if err != nil {
					b.Fatal(err)
				}
				var v map[string]any
				if err := json.Unmarshal(got, &v); err != nil {
					b.Fatal(err)
				}
			}
			roundtrip.Measure(b, inflight, send, recv)
		})
	}
}
