package roundtrip

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Measure keeps inflight operations going for b.N completions: send
// starts one, recv waits for the next to complete (completions come back
// in order). It reports the p50 and p99 of each one's round trip (µs) and
// the completions per second.
func Measure(b *testing.B, inflight int, send, recv func()) {
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

// Socketpair returns the two ends of a connected AF_UNIX stream pair, as
// the hub is.
func Socketpair(tb testing.TB) [2]net.Conn {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
	}
	return conns
}

// TightPair is Socketpair with send's send buffer set to sndbuf bytes,
// so that its writes fill the socket and come back short; both ends are
// closed when the test ends.
func TightPair(tb testing.TB, sndbuf int) (send, recv net.Conn) {
	tb.Helper()
	c := Socketpair(tb)
	for _, end := range c {
		tb.Cleanup(func() { end.Close() })
	}
	rc, err := c[0].(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sndbuf)
	}); err != nil {
		tb.Fatal(err)
	}
	if serr != nil {
		tb.Fatal(serr)
	}
	return c[0], c[1]
}

// EchoJSON is the far end of a floor: each line next returns is decoded
// with encoding/json, re-encoded and written back to w, until next or a
// write fails. It returns a channel closed when it has stopped.
func EchoJSON(w io.Writer, next func() ([]byte, error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := next()
			if err != nil {
				return
			}
			var v map[string]any
			if json.Unmarshal(line, &v) != nil {
				return
			}
			out, _ := json.Marshal(v)
			if _, err := w.Write(append(out, '\n')); err != nil {
				return
			}
		}
	}()
	return done
}

// AnswerToolCalls is a plain app's hub loop: each tool_call line next
// returns is answered ok on w (ToolResult), other lines are ignored,
// until next or a write fails. It returns a channel closed when it has
// stopped.
func AnswerToolCalls(w io.Writer, next func() ([]byte, error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := next()
			if err != nil {
				return
			}
			if b := ToolResult(line); b != nil {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
		}
	}()
	return done
}

// ToolResult is what a plain app does with a tool_call line: decode it
// with encoding/json and answer ok, as EchoJSON decodes and re-encodes
// its line (nil for any other line).
func ToolResult(line []byte) []byte {
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
