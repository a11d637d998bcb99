package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

func TestDaemonNotRunning(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the socket file stays, nobody listens: ECONNREFUSED

	for name, path := range map[string]string{
		"missing": filepath.Join(dir, "none.sock"),
		"stale":   stale,
	} {
		t.Run(name, func(t *testing.T) {
			c := &Client{Path: path}
			err := c.Do(context.Background(), OpStatus, nil, nil)
			if !IsDaemonNotRunning(err) {
				t.Fatalf("Do = %v, want daemon not running", err)
			}
			var nre *NotRunningError
			if !errors.As(err, &nre) || nre.Path != path || nre.Unwrap() == nil {
				t.Fatalf("error %#v does not carry the path and cause", err)
			}
		})
	}
}

func TestClientSocketPathDefault(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	var c Client
	if got, want := c.SocketPath(), "/run/user/1000/octosup/control.sock"; got != want {
		t.Fatalf("SocketPath = %q, want %q", got, want)
	}
}

// scriptedDaemon answers each request on a real socket with a script:
// an event first, then the answer.
func scriptedDaemon(t *testing.T, answer func(req Request) []string) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				sc := bufio.NewScanner(nc)
				for sc.Scan() {
					req, err := DecodeRequest(sc.Bytes())
					if err != nil {
						t.Errorf("client sent a bad request %q: %v", sc.Text(), err)
						return
					}
					for _, l := range answer(req) {
						if _, err := nc.Write([]byte(l + "\n")); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return &Client{Path: path}
}

func TestClientDo(t *testing.T) {
	c := scriptedDaemon(t, func(req Request) []string {
		switch req.Op {
		case OpStatus:
			id, _ := json.Marshal(req.ID)
			return []string{
				`{"event":"odd","id":"x","ok":3,"error":"a string"}`,
				`{"event":"state","app":"a","state":"running"}`,
				`{"id":` + string(id) + `,"ok":true,"data":{"apps":[{"id":"a","state":"running","pid":42,"restarts":1,"since":"2026-01-01T00:00:00Z","link":{"connected":true,"contexts":2,"outstanding_calls":3}}]}}`,
			}
		case OpStart:
			id, _ := json.Marshal(req.ID)
			return []string{`{"id":` + string(id) + `,"ok":false,"error":{"code":"unknown_app","message":"no app \"x\""}}`}
		case "refuse":
			return []string{`{"id":null,"ok":false,"error":{"code":"not_permitted","message":"go away"}}`}
		}
		return nil
	})
	ctx := context.Background()

	var data StatusData
	if err := c.Do(ctx, OpStatus, StatusArgs{}, &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Apps) != 1 || data.Apps[0].Pid != 42 || data.Apps[0].Link.OutstandingCalls != 3 {
		t.Fatalf("status data = %+v", data)
	}

	err := c.Do(ctx, OpStart, AppArgs{App: "x"}, nil)
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Code != CodeUnknownApp {
		t.Fatalf("start = %v, want unknown_app", err)
	}

	err = c.Do(ctx, "refuse", nil, nil)
	if !errors.As(err, &cerr) || cerr.Code != CodeNotPermitted {
		t.Fatalf("refused connection = %v, want not_permitted", err)
	}

	// Events of a stream come through Events, in order, after the answer.
	conn, err := c.Stream(ctx, OpStatus, nil, &data)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ev := <-conn.Events(); ev.Name != "odd" {
		t.Fatalf("first event %s, want the odd one", ev.Raw)
	}
	select {
	case ev := <-conn.Events():
		var st StateEvent
		if ev.Name != TopicState || ev.Decode(&st) != nil || st.App != "a" {
			t.Fatalf("event = %s", ev.Raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}

	// A call that waits for an answer that never comes ends with its
	// context.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := conn.Do(tctx, "silence", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered Do = %v, want deadline exceeded", err)
	}
	conn.Close()
	if err := conn.Do(ctx, OpStatus, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
	if _, ok := <-conn.Events(); ok {
		t.Fatal("Events still open after Close")
	}
	if !strings.Contains(conn.Err().Error(), "closed") {
		t.Fatalf("Err = %v", conn.Err())
	}
}

// TestCutWriteEndsConn: a request whose context ends while its line is
// still being written (the daemon is not reading) leaves part of a line
// on the connection: the Conn ends there, instead of sending its next
// request glued to that part, which the daemon would read as one
// malformed line.
func TestCutWriteEndsConn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan struct{}) // closed: the daemon reads
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		<-read
		r := bufio.NewReader(nc)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn := NewConn(nc)
	defer conn.Close()

	// More than the socket's buffers hold, under MaxLine; the deadline
	// leaves time to encode it (under -race) before its write starts.
	big := json.RawMessage(`"` + strings.Repeat("x", 900<<10) + `"`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := conn.Do(ctx, "app.send", big, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do of a line the daemon does not read = %v, want deadline exceeded", err)
	}
	close(read)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := conn.Do(ctx2, OpStatus, nil, nil); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("Do after a cut write = %v, want the connection ended, saying why", err)
	}
	for line := range lines {
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("the daemon read a malformed line of %d bytes: %v", len(line), err)
		}
	}
}

// TestAnswerRepeated: a daemon that answers one request again while its
// first answer is unread ends the connection with that said; the reader
// does not block on the answer nobody takes. (The request is in flight
// as a Do's would be, its answer not yet taken: the order a Do cannot
// hold still.)
func TestAnswerRepeated(t *testing.T) {
	nc, daemon := net.Pipe()
	conn := NewConn(nc)
	defer conn.Close()
	conn.mu.Lock()
	conn.pending[1] = make(chan []byte, 1)
	conn.mu.Unlock()
	go func() {
		for range 3 {
			if _, err := daemon.Write([]byte(`{"id":1,"ok":true,"data":{}}` + "\n")); err != nil {
				return
			}
		}
	}()
	ended := make(chan struct{})
	go func() {
		for range conn.Events() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection is still up after three answers to one request")
	}
	if err := conn.Err(); err == nil || !strings.Contains(err.Error(), "answered request 1 more than once") {
		t.Fatalf("Err = %v", err)
	}
}

// TestAnswerLines: an answer is its request's, however the daemon laid
// it out: with the id first (handed over unread, decoded once by the
// request) or elsewhere (read whole by the reader); one whose data does
// not fit fails its own request and leaves the connection up.
func TestAnswerLines(t *testing.T) {
	c := scriptedDaemon(t, func(req Request) []string {
		id := strconv.FormatInt(req.ID, 10)
		switch req.Op {
		case "first":
			return []string{`{"id":` + id + `,"ok":true,"data":{"apps":[{"id":"a","state":"running"}]}}`}
		case "later":
			return []string{`{"ok":true,"data":{"apps":[{"id":"b","state":"stopped"}]},"id":` + id + `}`}
		case "refused":
			return []string{`{"id":` + id + `,"ok":false,"error":{"code":"unknown_app","message":"no"}}`}
		case "misfit":
			return []string{`{"id":` + id + `,"ok":true,"data":{"apps":"not a list"}}`}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		op, app, err string
	}{
		{"first", "a", ""},
		{"later", "b", ""},
		{"refused", "", "unknown_app: no"},
		{"misfit", "", "misfit: decode answer"},
		{"first", "a", ""}, // the connection is still up
	} {
		var d StatusData
		err := conn.Do(ctx, tc.op, nil, &d)
		switch {
		case tc.err == "" && (err != nil || len(d.Apps) != 1 || d.Apps[0].ID != tc.app):
			t.Errorf("%s: %v %+v, want app %s", tc.op, err, d, tc.app)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want %q", tc.op, err, tc.err)
		}
	}
}

// FuzzAnswerID: the id answerID takes from a line without reading it is
// the one the whole line holds, for every line that is a JSON object.
func FuzzAnswerID(f *testing.F) {
	for _, s := range []string{`{"id":7,"ok":true}`, `{"id":12}`, `{"id":null,"ok":false}`, `{"id":-3,"ok":true}`,
		`{"id":7 ,"ok":true}`, `{"id":07,"ok":true}`, `{"id":1e3,"ok":true}`, `{"id":7,"id":8}`, `{"event":"state"}`, `{"id":99999999999999999999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		id, ok := answerID(line)
		if !ok {
			return
		}
		var msg struct {
			ID int64 `json:"id"`
		}
		if err := jsonv2.Unmarshal(line, &msg, answerOptions); err == nil && msg.ID != id {
			t.Fatalf("answerID(%q) = %d, the line holds %d", line, id, msg.ID)
		}
	})
}
