package peer

import (
	"encoding/json"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := a.r.Next()
			if err != nil {
				return
			}
			if b := echoResult(line); b != nil {
				if _, err := a.conn.Write(b); err != nil {
					return
				}
			}
		}
	}()
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
			measure(b, inflight, send, func() { <-relay.done })
		})
	}
	for _, inflight := range []int{1, 64} {
		b.Run("raw-echo/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			conns := socketpair(b)
			done := make(chan struct{})
			go func() {
				defer close(done)
				r := NewReader(conns[1], MaxFrame)
				for {
					line, err := r.Next()
					if err != nil {
						return
					}
					var v map[string]any
					if json.Unmarshal(line, &v) != nil {
						return
					}
					out, _ := json.Marshal(v)
					if _, err := conns[1].Write(append(out, '\n')); err != nil {
						return
					}
				}
			}()
			defer func() { conns[0].Close(); <-done; conns[1].Close() }()
			line, _ := EncodeDown(&ToolCall{CallID: "b1", Name: "notes.search", Args: json.RawMessage(`{"query":"milk"}`),
				Risk: RiskRead, TimeoutMS: 60000, Account: "personal", ContextID: "n0nce-2", Client: "notes", Caller: "bench"})
			r := NewReader(conns[0], MaxFrame)
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
			measure(b, inflight, send, recv)
		})
	}
}

// measure keeps inflight operations going for b.N completions: send
// starts one, recv waits for the next to complete (in order). It reports
// the p50 and p99 of each one's round trip and the completions per second.
func measure(b *testing.B, inflight int, send, recv func()) {
	lat := make([]time.Duration, 0, b.N)
	starts := make([]time.Time, 0, b.N+inflight)
	b.ResetTimer()
	t0 := time.Now()
	for range min(inflight, b.N) {
		starts = append(starts, time.Now())
		send()
	}
	for i := range b.N {
		recv()
		lat = append(lat, time.Since(starts[i]))
		if len(starts) < b.N {
			starts = append(starts, time.Now())
			send()
		}
	}
	el := time.Since(t0)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
}

func socketpair(b *testing.B) [2]net.Conn {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	return conns
}

// echoResult is what a plain app does with a tool_call line: decode it
// with encoding/json and answer ok, as the raw echo's far end decodes and
// re-encodes its line (nil for any other line).
func echoResult(line []byte) []byte {
	var f struct {
		Peer struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Name   string          `json:"name"`
			Args   json.RawMessage `json:"args"`
		} `json:"octos_peer"`
	}
	if json.Unmarshal(line, &f) != nil || f.Peer.Type != "tool_call" {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"octos_peer": map[string]any{
		"type": "tool_result", "call_id": f.Peer.CallID, "ok": true, "data": map[string]any{"matches": []any{}}}})
	return append(b, '\n')
}
