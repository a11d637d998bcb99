package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"octosup/control"
)

// TestConnEventBudget: a connection's unwritten events are bounded in
// bytes, not only in lines: big events that pile up drop it long before
// connQueue lines of them would.
func TestConnEventBudget(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A pipe has no descriptor: every line goes to the writer, which
	// does not run here.
	c := newConn(ctx, cancel, nil, a, zap.NewNop())
	line := bytes.Repeat([]byte("x"), 1<<20) // nobody writes them out
	sent := 0
	for range connQueue {
		if !c.event(line) {
			break
		}
		sent++
	}
	if sent*len(line) > connQueueBytes {
		t.Fatalf("queued %d events of %d bytes, over the %d-byte budget", sent, len(line), connQueueBytes)
	}
	select {
	case <-c.ctx.Done():
	default:
		t.Fatal("the connection over its budget was not dropped")
	}
}

// connPair is a Conn on one end of a real Unix socketpair, with its
// socket's send buffer made small so that a line of a few hundred KiB
// cannot go in one write; the test reads the other end.
func connPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		nc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		conns[i] = nc
	}
	if err := conns[0].(*net.UnixConn).SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := newConn(ctx, cancel, nil, conns[0], testLogger(t))
	return c, conns[1]
}

// runWriter runs c's writer loop until the test ends (Close, as
// serveConn does).
func runWriter(t *testing.T, c *Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.w.Run()
	}()
	t.Cleanup(func() {
		c.w.Close()
		<-done
	})
}

// readLines reads n lines from nc, each whole, within a deadline.
func readLines(t *testing.T, r *bufio.Reader, nc net.Conn, n int) []string {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	out := make([]string, 0, n)
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d lines: %v", len(out), err)
		}
		out = append(out, strings.TrimSuffix(line, "\n"))
	}
	return out
}

// TestConnWritesIdleLinesItself: on an idle connection a line is written
// by its sender, without the writer's loop (which does not run here); an
// answer goes out with the events its Then queues, before them.
func TestConnWritesIdleLinesItself(t *testing.T) {
	c, peerEnd := connPair(t)
	r := bufio.NewReader(peerEnd)
	if !c.event([]byte(`{"event":"state","n":1}`)) {
		t.Fatal("event refused")
	}
	if got := readLines(t, r, peerEnd, 1); got[0] != `{"event":"state","n":1}` {
		t.Fatalf("got %q", got)
	}
	c.reply(control.Response{ID: 7, OK: true})
	c.event([]byte(`{"event":"tool.acknowledged","n":2}`))
	c.event([]byte(`{"event":"tool.finished","n":3}`))
	got := readLines(t, r, peerEnd, 3)
	want := []string{`{"id":7,"ok":true}`, `{"event":"tool.acknowledged","n":2}`, `{"event":"tool.finished","n":3}`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestConnLinesWholeAndInOrder: lines far larger than the socket's
// buffer, written partly by their sender and the rest by the writer,
// arrive whole and in the order they were sent, interleaved with small
// ones sent meanwhile and from other goroutines' answers.
func TestConnLinesWholeAndInOrder(t *testing.T) {
	c, peerEnd := connPair(t)
	runWriter(t, c)
	const n = 60
	want := make([]string, n)
	for i := range want {
		size := 10
		if i%3 == 1 {
			size = 300 << 10 // many times the socket's buffer
		}
		want[i] = fmt.Sprintf(`{"event":"x","n":%d,"pad":"%s"}`, i, strings.Repeat(string(rune('a'+i%26)), size))
	}
	// All sent before any is read: the first big line fills the socket,
	// the rest queue behind what it did not take.
	for _, line := range want {
		if !c.event([]byte(line)) {
			t.Fatal("event refused")
		}
	}
	r := bufio.NewReader(peerEnd)
	check := func(got []string, want []string) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("line %d: %d bytes %.40q…, want %d bytes %.40q…", i, len(got[i]), got[i], len(want[i]), want[i])
			}
		}
	}
	check(readLines(t, r, peerEnd, n), want)
	// One at a time, each read before the next is sent: each starts on an
	// idle connection, written by its sender as far as the socket takes.
	for i := range want {
		if !c.event([]byte(want[i])) {
			t.Fatal("event refused")
		}
		check(readLines(t, r, peerEnd, 1), want[i:i+1])
	}
}

// TestConnAnswersAndEventsInOrder: answers and the events that become
// visible with them (their step, answerAt, makes a sink another
// goroutine sends to), from several goroutines, reach the socket each answer before its
// own events, and each goroutine's lines in its order.
func TestConnAnswersAndEventsInOrder(t *testing.T) {
	c, peerEnd := connPair(t)
	runWriter(t, c)
	const workers, each = 4, 100 // 800 lines: under connQueue, so no event is refused
	// visible carries each answer's id once its step ran: a sender
	// (another goroutine, as the hub's publisher is) sends its event then.
	visible := make(chan int64, workers*each)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 0; i < workers*each; i++ {
			id := <-visible
			c.event(fmt.Appendf(nil, `{"event":"e","id":%d,"pad":"%s"}`, id, strings.Repeat("p", int(id)*37%5000)))
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := int64(w*each + i + 1)
				c.answerAt(id, step(func(queue func(any)) error {
					queue(nil)
					visible <- id // the step makes the sink visible
					return nil
				}))
			}
		}()
	}
	got := readLines(t, bufio.NewReader(peerEnd), peerEnd, 2*workers*each)
	wg.Wait()
	<-sent
	next := make([]int64, workers) // the next answer of each goroutine
	due := map[int64]bool{}        // answers whose event has not come yet
	for i, line := range got {
		var probe struct {
			ID    int64  `json:"id"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &probe); err != nil {
			t.Fatalf("line %d not whole: %.60q (%v)", i, line, err)
		}
		if probe.Event != "" {
			if !due[probe.ID] {
				t.Fatalf("line %d: the event of %d before its answer (or twice)", i, probe.ID)
			}
			delete(due, probe.ID)
			continue
		}
		w := (probe.ID - 1) / each
		if want := w*each + next[w] + 1; probe.ID != want {
			t.Fatalf("line %d: answer %d, want %d next from its goroutine", i, probe.ID, want)
		}
		next[w]++
		due[probe.ID] = true
	}
	if len(due) != 0 {
		t.Fatalf("answers without their event: %v", due)
	}
}

// TestClientThatDoesNotRead: a client that sends requests and never reads
// their answers holds up its own connection only: its answers wait for
// room (bounded), other clients are served, and once it goes its
// connection is torn down (Serve returns at the test's end).
func TestClientThatDoesNotRead(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	deaf := dialRaw(t, ts.path)
	// Far more answers than its queue and the sockets' buffers hold.
	var b strings.Builder
	for i := range 4 * connQueue {
		fmt.Fprintf(&b, `{"id":%d,"op":"status"}`+"\n", i+1)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(deaf.nc, strings.Repeat(b.String(), 16))
		sent <- err // the daemon stops reading it: this ends when it is closed
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 50 {
		var st control.StatusData
		if err := ts.client.Do(ctx, control.OpStatus, nil, &st); err != nil || len(st.Apps) != 1 {
			t.Fatalf("status while a client does not read: %v %+v", err, st)
		}
	}
	// What it was sent is whole answers, in a stream that ends when it
	// goes.
	deaf.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range connQueue {
		if resp := deaf.response(); !resp.OK {
			t.Fatalf("%+v", resp.Error)
		}
	}
	deaf.nc.Close()
	if err := <-sent; err == nil {
		t.Fatal("all requests were read although their answers were not")
	}
}

// TestWaitStepWaitsForRoom: an answer queued by a waitStep (subscribe's)
// on a connection whose queue is full waits for the client to read, as
// any other answer does; one queued by a step (whose caller may hold an
// app's lock) drops the connection instead.
func TestWaitStepWaitsForRoom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		at      func(func(func(any)) error) answerAt
		answers bool
	}{
		{"waitStep", func(f func(func(any)) error) answerAt { return waitStep(f) }, true},
		{"step", func(f func(func(any)) error) answerAt { return step(f) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peerEnd := connPair(t)
			runWriter(t, c)
			event := []byte(`{"event":"state","pad":"` + strings.Repeat("p", 200) + `"}`)
			sent := 0
			for lines, _ := c.w.Queued(); lines < connQueue; lines, _ = c.w.Queued() {
				if !c.event(event) {
					t.Fatalf("event %d refused before the queue was full", sent)
				}
				sent++
			}
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				c.answerAt(7, tc.at(func(queue func(any)) error { queue(map[string]bool{"subscribed": true}); return nil }))
			}()
			if !tc.answers {
				select { // it must not wait: nothing is read yet
				case <-answered:
				case <-time.After(10 * time.Second):
					t.Fatal("a step's answer waited for room: its caller may hold an app's lock")
				}
			}
			r := bufio.NewReader(peerEnd)
			peerEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
			for i := 0; ; i++ {
				line, err := r.ReadString('\n')
				if err != nil {
					if tc.answers {
						t.Fatalf("after %d lines: %v", i, err)
					}
					return // dropped, as a step's answer must be
				}
				if strings.HasPrefix(line, `{"id":7`) {
					if !tc.answers {
						t.Fatal("a step's answer waited for room: its caller may hold an app's lock")
					}
					if i != sent {
						t.Fatalf("the answer came after %d events, want %d", i, sent)
					}
					<-answered
					return
				}
			}
		})
	}
}
