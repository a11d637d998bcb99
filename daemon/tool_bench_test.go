package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"octosup/internal/roundtrip"
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
				line := fmt.Sprintf(`{"id":%d,"op":"tool.call","args":{"app":"notes","call":{"call_id":"b%d","name":"notes.search","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":%q,"caller":"bench"}}}`+"\n", n+1, n, rig.ctx)
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
			roundtrip.Measure(b, inflight, send, recv)
		})
	}
	for _, inflight := range []int{1, 64} {
		b.Run("raw-echo/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			conns := roundtrip.Socketpair(b)
			r1 := bufio.NewReader(conns[1])
			done := roundtrip.EchoJSON(conns[1], func() ([]byte, error) { return r1.ReadSlice('\n') })
			defer func() { conns[0].Close(); <-done; conns[1].Close() }()
			line := []byte(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"b1","name":"notes.search","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":"n-1","caller":"bench"}}}` + "\n")
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
			roundtrip.Measure(b, inflight, send, recv)
		})
	}
}

// echo runs the rig's app: every tool_call answered ok at once.
func (r *toolRig) echo() (stop func()) {
	r.hub.SetReadDeadline(time.Time{})
	done := roundtrip.AnswerToolCalls(r.hub, func() ([]byte, error) { return r.r.ReadBytes('\n') })
	return func() { r.hub.Close(); <-done }
}
