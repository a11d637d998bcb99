package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeTrips completes round trips in the order given by order(sent):
// the index of the outstanding round trip that completes next.
type fakeTrips struct {
	outstanding []int
	order       func(outstanding []int) int
	sends       int
	maxOut      int
	fail        error
}

func (f *fakeTrips) send(i int) error {
	if i != f.sends {
		return fmt.Errorf("send %d, want %d", i, f.sends)
	}
	f.sends++
	f.outstanding = append(f.outstanding, i)
	f.maxOut = max(f.maxOut, len(f.outstanding))
	return nil
}

func (f *fakeTrips) recv() (int, error) {
	if f.fail != nil {
		return 0, f.fail
	}
	if len(f.outstanding) == 0 {
		return 0, errors.New("recv with nothing outstanding")
	}
	j := f.order(f.outstanding)
	i := f.outstanding[j]
	f.outstanding = append(f.outstanding[:j], f.outstanding[j+1:]...)
	return i, nil
}

func TestPipelined(t *testing.T) {
	first := func([]int) int { return 0 }
	last := func(o []int) int { return len(o) - 1 }
	for _, c := range []struct {
		name        string
		n, inflight int
		order       func([]int) int
		wantMax     int
	}{
		{"one at a time", 10, 1, first, 1},
		{"in order", 100, 8, first, 8},
		{"newest first", 100, 8, last, 8},
		{"window over n", 5, 64, first, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeTrips{order: c.order}
			lat, el, err := pipelined(c.n, c.inflight, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(lat) != c.n || f.sends != c.n || f.maxOut != c.wantMax || el <= 0 {
				t.Errorf("%d times, %d sends, at most %d outstanding (want %d), elapsed %v", len(lat), f.sends, f.maxOut, c.wantMax, el)
			}
			for i, d := range lat {
				if d <= 0 {
					t.Errorf("round trip %d: %v", i, d)
				}
			}
		})
	}
	t.Run("bad completions", func(t *testing.T) {
		for _, c := range []struct {
			name string
			f    *fakeTrips
		}{
			{"never sent", &fakeTrips{order: func([]int) int { return 0 }}},
			{"failure", &fakeTrips{fail: errors.New("boom")}},
		} {
			if c.name == "never sent" {
				// Complete an index past what was sent.
				c.f.order = func(o []int) int { o[0] = 99; return 0 }
			}
			if _, _, err := pipelined(10, 2, c.f); err == nil {
				t.Errorf("%s: no error", c.name)
			}
		}
		if _, _, err := pipelined(0, 1, &fakeTrips{}); err == nil {
			t.Error("0 round trips: no error")
		}
	})
}

func TestSeqAndLines(t *testing.T) {
	line := toolCallLine(nil, 1234, "ctx-1")
	if !json.Valid(line) || line[len(line)-1] != '\n' {
		t.Fatalf("tool.call line %q", line)
	}
	id, err := toolCallID(line)
	if err != nil || id != "b1234" {
		t.Errorf("toolCallID = %q, %v", id, err)
	}
	line = requestLine(nil, 7, "ctx-1")
	if id, err := requestID(line); err != nil || id != "b7" || !json.Valid(line) {
		t.Errorf("requestID(%q) = %q, %v", line, id, err)
	}
	for _, c := range []struct {
		id   string
		base int
		want int
		ok   bool
	}{
		{"b10", 4, 6, true}, {"b0", 0, 0, true}, {"x1", 0, 0, false}, {"b", 0, 0, false}, {"b1x", 0, 0, false},
	} {
		got, err := seq(c.id, c.base)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("seq(%q, %d) = %d, %v", c.id, c.base, got, err)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	b, err := os.ReadFile("testdata/proc-stat.txt")
	if err != nil {
		t.Fatal(err)
	}
	// utime 734 + stime 129 ticks of 10 ms; the command has spaces and
	// parentheses.
	if got, err := parseStatCPU(b); err != nil || got != 8630*time.Millisecond {
		t.Errorf("got %v, %v; want 8.63s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -1 0", "1 (x) S 1 2 3 4 5 6 7 8 9 10 a 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if c, err := cpuTime(os.Getpid()); err != nil || c < 0 {
		t.Errorf("cpuTime(self) = %v, %v", c, err)
	}
}

func FuzzParseStatCPU(f *testing.F) {
	if b, err := os.ReadFile("testdata/proc-stat.txt"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("1 (a) b) R 0 0 0 0 0 0 0 0 0 0 99999999999999999999 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := parseStatCPU(b); err == nil && d < 0 {
			t.Errorf("negative CPU time %v", d)
		}
	})
}

// TestJSONEcho runs the floor's programs as the sections do: the echo
// and the relay give back every line, in order, and both exit cleanly at
// end-of-file.
func TestJSONEcho(t *testing.T) {
	echoPath := filepath.Join(build(t, false, "octosup/bench/jsonecho"), "jsonecho")
	logw, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logw.Close()
	for _, relay := range []bool{false, true} {
		t.Run(fmt.Sprintf("relay=%v", relay), func(t *testing.T) {
			e, err := startEcho(echoPath, relay, logw)
			if err != nil {
				t.Fatal(err)
			}
			s := roundTripSection{line: toolCallLine, id: toolCallID}
			lat, _, err := echoRunner(e, s, "ctx-1", 10*time.Second)(500, 16)
			if err != nil || len(lat) != 500 {
				t.Fatalf("%d round trips: %v", len(lat), err)
			}
			if err := e.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	out, err := exec.Command(echoPath, "nope").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "usage") {
		t.Errorf("jsonecho nope: %v, %q", err, out)
	}
}

// TestToolApp plays the daemon on the tool app's hub: the session it
// opens, a tool call it answers, and a requests run it times.
func TestToolApp(t *testing.T) {
	app := filepath.Join(build(t, false, "octosup/bench/toolapp"), "toolapp")
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "app")
	cmd := exec.Command(app)
	cmd.ExtraFiles = []*os.File{theirs}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	mine := os.NewFile(uintptr(fds[0]), "hub")
	hub, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	hub.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(hub)
	next := func() map[string]any {
		t.Helper()
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read the hub: %v (stderr %q)", err, stderr.String())
		}
		var v map[string]any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return v
	}
	write := func(line string) {
		t.Helper()
		if _, err := hub.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	peer := func(v map[string]any) map[string]any { p, _ := v["octos_peer"].(map[string]any); return p }
	bench := func(v map[string]any) map[string]any { p, _ := v["bench_app"].(map[string]any); return p }

	// A command before the session is open is refused, and said so.
	write(`{"bench":{"requests":1,"inflight":1}}`)
	open := peer(next())
	if open["type"] != "request" || open["method"] != "octos.session.open" || open["req_id"] != "open" {
		t.Fatalf("first frame %v, want the session's open", open)
	}
	if ev := bench(next()); ev["event"] != "error" {
		t.Errorf("a requests run without a context: %v", ev)
	}
	write(`{"octos_peer":{"type":"reply","req_id":"open","ok":true,"data":{"context_id":"c-1"}}}`)
	if ev := bench(next()); ev["event"] != "ready" || ev["context_id"] != "c-1" {
		t.Errorf("after the open: %v", ev)
	}
	write(`{"octos_peer":{"type":"tool_call","call_id":"k\"1","name":"bench.echo","args":{},"risk":"read","confirm_required":false,"timeout_ms":1000,"account":"bench","context_id":"c-1","client":"tools","caller":"x"}}`)
	if res := peer(next()); res["type"] != "tool_result" || res["call_id"] != `k"1` || res["ok"] != true {
		t.Errorf("tool_result %v", res)
	}
	write(`{"bench":{"requests":3,"inflight":2}}`)
	var ids []string
	for range 2 {
		req := peer(next())
		args, _ := req["args"].(map[string]any)
		if req["method"] != "octos.turn.interrupt" || args["context_id"] != "c-1" {
			t.Fatalf("request %v", req)
		}
		ids = append(ids, req["req_id"].(string))
	}
	write(fmt.Sprintf(`{"octos_peer":{"type":"reply","req_id":%q,"ok":true,"data":{}}}`, ids[1]))
	third := peer(next())
	write(fmt.Sprintf(`{"octos_peer":{"type":"reply","req_id":%q,"ok":true,"data":{}}}`, ids[0]))
	write(fmt.Sprintf(`{"octos_peer":{"type":"reply","req_id":%q,"ok":true,"data":{}}}`, third["req_id"]))
	done := bench(next())
	lat, _ := done["lat_ns"].([]any)
	if done["event"] != "requests" || len(lat) != 3 {
		t.Fatalf("the run's answer %v", done)
	}
	for i, ns := range lat {
		if f, _ := ns.(float64); f <= 0 {
			t.Errorf("request %d took %v ns", i, ns)
		}
	}
	// The hub's end: the app exits, cleanly.
	hub.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("toolapp: %v (stderr %q)", err, stderr.String())
	}
}
