package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkToolCallControl measures a tool call as a kernel sees it: a
// tool.call line on the control socket -> the daemon -> the app's hub ->
// the app's tool_result -> the daemon -> the tool.finished event, with 1
// and 64 calls in flight; and, in the same run, the floor: a JSON line
// each way over a raw socketpair, decoded and re-encoded at the far end.
// Each reports p50/p99 (µs) and calls (or echoes) per second.
func BenchmarkToolCallControl(b *testing.B) {
	for _, inflight := range []int{1, 64} {
		b.Run("daemon/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			rig := newToolRig(b)
			stop := rig.echo()
			defer stop()
			k := rig.kernel()
			k.nc.SetReadDeadline(time.Time{})
			n := 0
			send := func() {
				n++
				line := fmt.Sprintf(`{"id":%d,"op":"tool.call","args":{"app":"notes","call":{"call_id":"b%d","name":"notes.search","args":{"query":"milk"},"risk":"read","timeout_ms":60000,"context_id":%q,"caller":"bench"}}}`+"\n", n+1, n, rig.ctx)
				if _, err := k.nc.Write([]byte(line)); err != nil {
					b.Fatal(err)
				}
			}
			recv := func() {
				for {
					line, err := k.r.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if strings.HasPrefix(string(line), `{"event":"tool.finished"`) {
						if !strings.Contains(string(line), `"outcome":"ok"`) {
							b.Fatalf("call failed: %s", line)
						}
						return
					}
				}
			}
			measureRoundTrips(b, inflight, send, recv)
		})
	}
	for _, inflight := range []int{1, 64} {
		b.Run("raw-echo/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
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
			done := make(chan struct{})
			go func() {
				defer close(done)
				r := bufio.NewReader(conns[1])
				for {
					line, err := r.ReadSlice('\n')
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
			line := []byte(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"b1","name":"notes.search","args":{"query":"milk"},"risk":"read","timeout_ms":60000,"context_id":"n-1","caller":"bench"}}}` + "\n")
			r := bufio.NewReader(conns[0])
			send := func() {
				if _, err := conns[0].Write(line); err != nil {
					b.Fatal(err)
				}
			}
			recv := func() {
				got, err := r.ReadSlice('\n')
				if err != nil {
					b.Fatal(err)
				}
				var v map[string]any
				if err := json.Unmarshal(got, &v); err != nil {
					b.Fatal(err)
				}
			}
			measureRoundTrips(b, inflight, send, recv)
		})
	}
}

// echo runs the rig's app: every tool_call answered ok at once.
func (r *toolRig) echo() (stop func()) {
	done := make(chan struct{})
	r.hub.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		for {
			line, err := r.r.Next()
			if err != nil {
				return
			}
			if b := echoResult(line); b != nil {
				if _, err := r.hub.Write(b); err != nil {
					return
				}
			}
		}
	}()
	return func() { r.hub.Close(); <-done }
}

// measureRoundTrips keeps inflight operations going for b.N completions
// (completions come back in order) and reports p50/p99 and ops/s.
func measureRoundTrips(b *testing.B, inflight int, send, recv func()) {
	lat := make([]time.Duration, 0, b.N)
	starts := make([]time.Time, 0, b.N)
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
