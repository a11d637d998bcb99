package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/supervisor"
)

type testServer struct {
	srv    *Server
	apps   *fakeApps
	path   string
	client *control.Client
}

// startServer serves apps on a real socket in a private directory until
// the test ends.
func startServer(t testing.TB, apps *fakeApps, edit func(*ServerConfig)) *testServer {
	t.Helper()
	return startServerOn(t, apps, edit, nil, nil)
}

// startServerOn is startServer with its listener wrapped by wrap (nil:
// as it is) and register adding ops and topics before it serves (nil:
// none), as Config.Setup does.
func startServerOn(t testing.TB, apps *fakeApps, edit func(*ServerConfig), wrap func(net.Listener) net.Listener, register func(*Server)) *testServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "octosup", "control.sock")
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := listenUnix(ctx, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	cfg := ServerConfig{Apps: apps, Log: testLogger(t)}
	if edit != nil {
		edit(&cfg)
	}
	srv := NewServer(cfg)
	if register != nil {
		register(srv)
	}
	apps.mu.Lock()
	apps.publish = srv.supervisorEvent
	apps.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{srv: srv, apps: apps, path: path, client: &control.Client{Path: path}}
}

// rawConn speaks the protocol by hand, line by line.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: bufio.NewReaderSize(nc, 1<<16)}
}

func (c *rawConn) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, line+"\n"); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// line reads the next line of any kind.
func (c *rawConn) line() []byte {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return b
}

// response reads lines up to the next answer, failing on events.
func (c *rawConn) response() control.Response {
	c.t.Helper()
	b := c.line()
	var resp control.Response
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		c.t.Fatalf("not an answer: %s (%v)", b, err)
	}
	return resp
}

func codeOf(err error) string {
	var cerr *control.Error
	if errors.As(err, &cerr) {
		return cerr.Code
	}
	return ""
}

func TestOps(t *testing.T) {
	ts := startServer(t, newFakeApps("a", "b"), func(c *ServerConfig) {
		c.LinkStatus = func(id string) control.LinkStatus {
			return control.LinkStatus{Connected: id == "a", Contexts: len(id)}
		}
	})
	for i := range 3 {
		ts.apps.write("a", fmt.Sprintf("line %d", i))
	}
	ctx := context.Background()
	tests := []struct {
		name     string
		op       string
		args     any
		wantCode string
		check    func(t *testing.T, data json.RawMessage)
	}{
		{name: "status all", op: control.OpStatus, check: func(t *testing.T, raw json.RawMessage) {
			var d control.StatusData
			mustUnmarshal(t, raw, &d)
			if len(d.Apps) != 2 || d.Apps[0].ID != "a" || d.Apps[1].ID != "b" || d.Apps[0].State != "stopped" {
				t.Fatalf("status = %s", raw)
			}
			if !d.Apps[0].Link.Connected || d.Apps[1].Link.Connected || d.Apps[1].Link.Contexts != 1 {
				t.Fatalf("link members not filled by LinkStatus: %s", raw)
			}
			if !strings.Contains(string(raw), `"link":{"connected":true,"contexts":1,"outstanding_calls":0}`) {
				t.Fatalf("link member not on the wire as docs/control.md says: %s", raw)
			}
		}},
		{name: "hello", op: control.OpHello, check: func(t *testing.T, raw json.RawMessage) {
			var d control.HelloData
			mustUnmarshal(t, raw, &d)
			if d.Protocol != "octosup-control" || d.Version != 1 || d.MaxLine != control.MaxLine ||
				!slices.Contains(d.Ops, "status") || !slices.Contains(d.Ops, "hello") || !slices.IsSorted(d.Ops) ||
				!slices.Equal(d.Topics, []string{"app.frame", "approval", "log", "state"}) {
				t.Fatalf("hello = %s", raw)
			}
		}},
		{name: "start", op: control.OpStart, args: control.AppArgs{App: "a"}, check: func(t *testing.T, raw json.RawMessage) {
			var d control.StateData
			mustUnmarshal(t, raw, &d)
			if d.State != "running" || d.App.Pid == 0 {
				t.Fatalf("start = %s", raw)
			}
		}},
		{name: "status one", op: control.OpStatus, args: control.StatusArgs{App: "a"}, check: func(t *testing.T, raw json.RawMessage) {
			var d control.StatusData
			mustUnmarshal(t, raw, &d)
			if len(d.Apps) != 1 || d.Apps[0].State != "running" {
				t.Fatalf("status a = %s", raw)
			}
		}},
		{name: "restart", op: control.OpRestart, args: control.AppArgs{App: "a"}, check: func(t *testing.T, raw json.RawMessage) {
			var d control.StateData
			mustUnmarshal(t, raw, &d)
			if d.State != "running" || d.App.Restarts != 1 {
				t.Fatalf("restart = %s", raw)
			}
		}},
		{name: "stop", op: control.OpStop, args: control.AppArgs{App: "a"}, check: func(t *testing.T, raw json.RawMessage) {
			var d control.StateData
			mustUnmarshal(t, raw, &d)
			if d.State != "stopped" || d.App.LastExit == nil || d.App.LastExit.Signal != "SIGTERM" {
				t.Fatalf("stop = %s", raw)
			}
		}},
		{name: "logs", op: control.OpLogs, args: control.LogsArgs{App: "a", Lines: 2}, check: func(t *testing.T, raw json.RawMessage) {
			var d control.LogsData
			mustUnmarshal(t, raw, &d)
			if len(d.Lines) != 2 || d.Lines[0].Text != "line 1" || d.Lines[1].Text != "line 2" || d.Lines[1].App != "a" {
				t.Fatalf("logs = %s", raw)
			}
		}},
		{name: "start unknown app", op: control.OpStart, args: control.AppArgs{App: "nope"}, wantCode: control.CodeUnknownApp},
		{name: "status unknown app", op: control.OpStatus, args: control.StatusArgs{App: "nope"}, wantCode: control.CodeUnknownApp},
		{name: "logs unknown app", op: control.OpLogs, args: control.LogsArgs{App: "nope"}, wantCode: control.CodeUnknownApp},
		{name: "start without app", op: control.OpStart, args: struct{}{}, wantCode: control.CodeBadRequest},
		{name: "status unknown arg", op: control.OpStatus, args: map[string]int{"verbose": 1}, wantCode: control.CodeBadRequest},
		{name: "args of wrong type", op: control.OpStop, args: map[string]int{"app": 1}, wantCode: control.CodeBadRequest},
		{name: "unknown topic", op: control.OpSubscribe, args: control.SubscribeArgs{Topics: []string{"state", "bogus"}}, wantCode: control.CodeBadRequest},
		{name: "unknown op", op: "frobnicate", wantCode: control.CodeUnknownOp},
		{name: "reload without a manifest", op: control.OpReload, wantCode: control.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data json.RawMessage
			err := ts.client.Do(ctx, tt.op, tt.args, &data)
			if got := codeOf(err); got != tt.wantCode || (tt.wantCode == "" && err != nil) {
				t.Fatalf("%s: err = %v, want code %q", tt.op, err, tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, data)
			}
		})
	}
}

func mustUnmarshal(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

func TestMalformedLines(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	c := dialRaw(t, ts.path)
	tests := []struct {
		line   string
		wantID int64
	}{
		{`not json`, 0},
		{`{"id":5,"op":"status","bogus":true}`, 5},
		{`{"id":6}`, 6},
		{`{"id":7,"op":"status","args":"app"}`, 7},
		{`{"id":"8","op":"status"}`, 0},
		{`{"id":9,"op":"status"} trailing`, 9},
		{"{\"id\":10,\"op\":\"\xff\xfe\"", 0},
		{`[]`, 0},
	}
	for i, tt := range tests {
		c.send(tt.line)
		raw := c.line()
		var resp control.Response
		mustUnmarshal(t, raw, &resp)
		if resp.OK || resp.Error == nil || resp.Error.Code != control.CodeBadRequest || resp.ID != tt.wantID {
			t.Fatalf("%q: answer %+v, want bad_request with id %d", tt.line, resp, tt.wantID)
		}
		// A line without a usable id is answered "id": null, never an id
		// a client could take for one of its own.
		wantID := `{"id":null,`
		if tt.wantID != 0 {
			wantID = fmt.Sprintf(`{"id":%d,`, tt.wantID)
		}
		if !bytes.HasPrefix(raw, []byte(wantID)) {
			t.Fatalf("%q: answered %s, want it to start %s", tt.line, raw, wantID)
		}
		// The connection survives: the next request is served.
		id := int64(100 + i)
		c.send(fmt.Sprintf(`{"id":%d,"op":"status"}`, id))
		if resp := c.response(); !resp.OK || resp.ID != id {
			t.Fatalf("after %q: status answer %+v", tt.line, resp)
		}
	}
	// Empty lines are skipped without an answer.
	c.send("")
	c.send(`{"id":200,"op":"status"}`)
	if resp := c.response(); !resp.OK || resp.ID != 200 {
		t.Fatalf("after an empty line: %+v", resp)
	}
}

func TestOversizedLine(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	c := dialRaw(t, ts.path)
	big := `{"id":1,"op":"status","args":{"app":"` + strings.Repeat("x", 2*control.MaxLine) + `"}}`
	go func() {
		// Written while the daemon reads: it must skip, not buffer.
		io.WriteString(c.nc, big+"\n"+`{"id":2,"op":"status"}`+"\n")
	}()
	resp := c.response()
	if resp.OK || resp.Error.Code != control.CodeBadRequest || !strings.Contains(resp.Error.Message, "over") {
		t.Fatalf("oversized line answered %.200v", resp)
	}
	if resp := c.response(); !resp.OK || resp.ID != 2 {
		t.Fatalf("the request after an oversized line: %+v", resp)
	}
	// Exactly at the limit is still a request.
	pad := control.MaxLine - len(`{"id":3,"op":"status"}`)
	c.send(`{"id":3,"op":"status"` + strings.Repeat(" ", pad) + `}`)
	if resp := c.response(); resp.ID != 3 || !resp.OK {
		t.Fatalf("a line of exactly MaxLine bytes: %.200v", resp)
	}
	c.send(`{"id":4,"op":"status"` + strings.Repeat(" ", pad+1) + `}`)
	if raw := c.line(); !bytes.HasPrefix(raw, []byte(`{"id":null,"ok":false,"error":{"code":"bad_request"`)) {
		t.Fatalf("a line of MaxLine+1 bytes: %.200s", raw)
	}
}

func TestSubscribe(t *testing.T) {
	ts := startServer(t, newFakeApps("a", "b"), nil)
	ctx := context.Background()
	states, err := ts.client.Subscribe(ctx, control.TopicState)
	if err != nil {
		t.Fatal(err)
	}
	defer states.Close()
	approvals, err := ts.client.Subscribe(ctx, control.TopicApproval)
	if err != nil {
		t.Fatal(err)
	}
	defer approvals.Close()

	if err := ts.client.Do(ctx, control.OpStart, control.AppArgs{App: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, states)
	var st control.StateEvent
	if ev.Name != control.TopicState || ev.Decode(&st) != nil || st.App != "b" || st.State != "running" || st.Pid == 0 {
		t.Fatalf("state event = %s", ev.Raw)
	}

	// Publish is the peer link's way in: generic topics, any object.
	ts.srv.publish(control.TopicApproval, "b", map[string]any{"approval_id": "x1", "app": "b", "kind": "consent"})
	ev = nextEvent(t, approvals)
	if ev.Name != control.TopicApproval || !strings.Contains(string(ev.Raw), `"approval_id":"x1"`) {
		t.Fatalf("approval event = %s", ev.Raw)
	}
	// The state subscriber did not get it: its next event is the next state.
	if err := ts.client.Do(ctx, control.OpStop, control.AppArgs{App: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, states); ev.Name != control.TopicState {
		t.Fatalf("state subscriber got %s", ev.Raw)
	}
}

// TestWarningReachesStateSubscribers: a supervisor's limit warning goes
// out on the state topic, with the app's state unchanged and the warning
// set, so that watch and the shell see it.
func TestWarningReachesStateSubscribers(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	ctx := context.Background()
	states, err := ts.client.Subscribe(ctx, control.TopicState)
	if err != nil {
		t.Fatal(err)
	}
	defer states.Close()
	if err := ts.client.Do(ctx, control.OpStart, control.AppArgs{App: "a"}, nil); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, states) // running
	ts.apps.warn("a", "tasks_max reached (512): the app's forks and new threads fail")
	var st control.StateEvent
	if ev := nextEvent(t, states); ev.Name != control.TopicState || ev.Decode(&st) != nil ||
		st.App != "a" || st.State != "running" || st.Warning != "tasks_max reached (512): the app's forks and new threads fail" {
		t.Fatalf("warning event = %s", ev.Raw)
	}
}

func nextEvent(t *testing.T, c *control.Conn) control.Event {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		if !ok {
			t.Fatalf("stream ended: %v", c.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	panic("unreachable")
}

// TestLogsFollow: the answer comes first, then every later line once,
// with none lost between the snapshot and the stream, and no other app's.
func TestLogsFollow(t *testing.T) {
	ts := startServer(t, newFakeApps("a", "b"), nil)
	const before, total = 50, 400
	for i := range before {
		ts.apps.write("a", fmt.Sprintf("%d", i))
	}
	c := dialRaw(t, ts.path)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := before; i < total; i++ {
			ts.apps.write("a", fmt.Sprintf("%d", i))
			ts.apps.write("b", "other")
		}
	}()
	c.send(`{"id":1,"op":"logs","args":{"app":"a","lines":5,"follow":true}}`)
	resp := c.response()
	wg.Wait()
	if !resp.OK {
		t.Fatalf("logs follow: %+v", resp.Error)
	}
	var d control.LogsData
	if err := json.Unmarshal(resp.Data, &d); err != nil || len(d.Lines) != 5 {
		t.Fatalf("logs data %s", resp.Data)
	}
	var next int
	fmt.Sscan(d.Lines[4].Text, &next)
	next++
	for next < total {
		var l struct {
			Event string `json:"event"`
			control.LogLine
		}
		b := c.line()
		if err := json.Unmarshal(b, &l); err != nil || l.Event != control.TopicLog || l.App != "a" {
			t.Fatalf("expected a log event of a, got %s", b)
		}
		if l.Text != fmt.Sprint(next) {
			t.Fatalf("log event %q, want %d (lost or repeated a line)", l.Text, next)
		}
		next++
	}
}

// followOld follows app a's log, whose one line so far is "old", and
// returns the connection once the answer holds that line.
func followOld(t *testing.T, ts *testServer) *rawConn {
	t.Helper()
	c := dialRaw(t, ts.path)
	c.send(`{"id":1,"op":"logs","args":{"app":"a","lines":5,"follow":true}}`)
	resp := c.response()
	var d control.LogsData
	if err := json.Unmarshal(resp.Data, &d); !resp.OK || err != nil || len(d.Lines) != 1 || d.Lines[0].Text != "old" {
		t.Fatalf("logs follow: %+v %s", resp.Error, resp.Data)
	}
	return c
}

// TestLogsFollowOutlivesAClockStep: lines stamped earlier than the
// answer's last (the wall clock stepped back) or at the same instant are
// neither lost nor repeated: a follower goes by the order of the app's
// lines, never by their times.
func TestLogsFollowOutlivesAClockStep(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	now := time.Now()
	ts.apps.writeAt("a", "old", now)
	c := followOld(t, ts)
	ts.apps.writeAt("a", "back an hour", now.Add(-time.Hour))
	ts.apps.writeAt("a", "back a minute", now.Add(-time.Minute))
	ts.apps.writeAt("a", "same instant", now)
	for _, want := range []string{"back an hour", "back a minute", "same instant"} {
		var l control.LogLine
		if b := c.line(); json.Unmarshal(b, &l) != nil || l.Text != want {
			t.Fatalf("got %s, want the log event %q (lost or repeated)", b, want)
		}
	}
}

// TestSlowSubscriber: a subscriber that never reads is dropped; status
// on other connections, and the publisher, never wait for it.
func TestSlowSubscriber(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	slow := dialRaw(t, ts.path)
	slow.send(`{"id":1,"op":"subscribe","args":{"topics":["state","app.frame"]}}`)
	if resp := slow.response(); !resp.OK {
		t.Fatalf("subscribe: %+v", resp)
	}
	// slow never reads again. Flood it: far more than its queue and the
	// socket's buffers hold.
	frame := map[string]any{"app": "a", "frame": strings.Repeat("z", 4096)}
	published := make(chan struct{})
	go func() {
		defer close(published)
		for range 5 * connQueue {
			ts.srv.publish(control.TopicAppFrame, "a", frame)
		}
	}()
	select {
	case <-published:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	// Status still answers, on a new connection and with state events
	// being published to the dropped subscriber.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 20 {
		if err := ts.client.Do(ctx, control.OpRestart, control.AppArgs{App: "a"}, nil); err != nil {
			t.Fatal(err)
		}
		if err := ts.client.Do(ctx, control.OpStatus, nil, nil); err != nil {
			t.Fatalf("status while a subscriber does not read: %v", err)
		}
	}
	// The slow subscriber was cut off: what was queued, then EOF.
	slow.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, slow.r); err != nil {
		t.Fatalf("the slow subscriber was not disconnected: %v", err)
	}
}

func TestConcurrentClients(t *testing.T) {
	const n = 50
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("app-%d", i)
	}
	ts := startServer(t, newFakeApps(ids...), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := ts.client.Connect(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			// Several requests in flight on one connection at once.
			var inner sync.WaitGroup
			for range 4 {
				inner.Add(1)
				go func() {
					defer inner.Done()
					var d control.StatusData
					if err := conn.Do(ctx, control.OpStatus, control.StatusArgs{App: id}, &d); err != nil {
						errs <- fmt.Errorf("status %s: %w", id, err)
					} else if len(d.Apps) != 1 || d.Apps[0].ID != id {
						errs <- fmt.Errorf("status %s answered for %+v", id, d.Apps)
					}
				}()
			}
			var st control.StateData
			if err := conn.Do(ctx, control.OpStart, control.AppArgs{App: id}, &st); err != nil || st.State != "running" {
				errs <- fmt.Errorf("start %s: %v %+v", id, err, st)
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var d control.StatusData
	if err := ts.client.Do(ctx, control.OpStatus, nil, &d); err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Apps {
		if a.State != "running" {
			t.Errorf("%s is %s after its start", a.ID, a.State)
		}
	}
}

// TestExtension: ops and topics added by others (the peer link) are
// served like the built-in ones; an event put on one connection reaches
// it, before the answer when put before it, after it when its step
// (answerAt) puts it after queueing the answer.
func TestExtension(t *testing.T) {
	ts := startServerOn(t, newFakeApps("a"), nil, nil, func(s *Server) {
		s.topics["test.topic"] = true
		s.handle("test.attach", func(ctx context.Context, c *Conn, args json.RawMessage) (any, error) {
			var a struct {
				Say string `json:"say"`
			}
			if err := control.DecodeArgs(args, &a); err != nil {
				return nil, err
			}
			// Sent before the answer is queued: it arrives first.
			hello, err := control.EncodeEvent("test.hello", map[string]string{"said": a.Say})
			if err != nil || !c.event(hello) {
				return nil, fmt.Errorf("send test.hello: %v", err)
			}
			return step(func(queue func(any)) error {
				queue(map[string]bool{"attached": true})
				after, _ := control.EncodeEvent("test.after", struct{}{})
				c.event(after)
				return nil
			}), nil
		})
		func() {
			defer func() {
				if recover() == nil {
					t.Error("registering an op twice did not panic")
				}
			}()
			s.handle(control.OpStatus, nil)
		}()
	})

	c := dialRaw(t, ts.path)
	c.send(`{"id":1,"op":"test.attach","args":{"say":"hi"}}`)
	if b := c.line(); !bytes.Contains(b, []byte(`{"event":"test.hello","said":"hi"}`)) {
		t.Fatalf("event line = %s", b)
	}
	if resp := c.response(); !resp.OK || string(resp.Data) != `{"attached":true}` {
		t.Fatalf("answer = %+v", resp)
	}
	if b := c.line(); string(bytes.TrimSpace(b)) != `{"event":"test.after"}` {
		t.Fatalf("after the answer: %s", b)
	}
	c.send(`{"id":2,"op":"subscribe","args":{"topics":["test.topic"]}}`)
	if resp := c.response(); !resp.OK || string(resp.Data) != `{"topics":["test.topic"]}` {
		t.Fatalf("subscribe = %+v %s", resp, resp.Data)
	}
	ts.srv.publish("test.topic", "", struct {
		N int `json:"n"`
	}{7})
	if b := c.line(); string(bytes.TrimSpace(b)) != `{"event":"test.topic","n":7}` {
		t.Fatalf("published = %s", b)
	}
}

func TestRefusedPeers(t *testing.T) {
	t.Run("inside an app", func(t *testing.T) {
		apps := newFakeApps("a")
		apps.owners[os.Getpid()] = "a"
		ts := startServer(t, apps, nil)
		err := ts.client.Do(context.Background(), control.OpStatus, nil, nil)
		if codeOf(err) != control.CodeNotPermitted || !strings.Contains(err.Error(), `app "a"`) {
			t.Fatalf("a peer inside app a: %v, want not_permitted naming the app", err)
		}
	})
	t.Run("foreign uid", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run a client as another uid")
		}
		ts := startServer(t, newFakeApps("a"), nil)
		// Open the socket's file permissions so that only SO_PEERCRED
		// stands between uid 65534 and the daemon.
		shared, err := os.MkdirTemp("", "octosup-peer-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(shared)
		os.Chmod(shared, 0o755)
		for dir := filepath.Dir(ts.path); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
			os.Chmod(dir, 0o755)
		}
		os.Chmod(ts.path, 0o666)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(shared, "client")
		copyFile(t, exe, bin, 0o755)
		cmd := exec.Command(bin)
		cmd.Env = []string{"OCTOSUP_TEST_DIAL=" + ts.path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client as nobody: %v: %s", err, stderr.Bytes())
		}
		var resp control.Response
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("client as nobody read %q: %v", out, err)
		}
		if resp.OK || resp.Error == nil || resp.Error.Code != control.CodeNotPermitted || !strings.Contains(resp.Error.Message, "uid 65534") ||
			!bytes.HasPrefix(out, []byte(`{"id":null,`)) {
			t.Fatalf("uid 65534 was answered %s, want not_permitted", out)
		}
	})
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStatus is status of 100 apps over a real socket, one
// connection, one request at a time (the fake supervisor answers at once:
// this is the control path's own cost).
func BenchmarkStatus(b *testing.B) {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("app-%d", i)
	}
	ts := startServer(b, newFakeApps(ids...), nil)
	ctx := context.Background()
	conn, err := ts.client.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var d control.StatusData
	for b.Loop() {
		if err := conn.Do(ctx, control.OpStatus, nil, &d); err != nil {
			b.Fatal(err)
		}
	}
	if len(d.Apps) != 100 {
		b.Fatalf("%d apps", len(d.Apps))
	}
}

var _ = supervisor.Running

// TestStatusReadsUsageOnlyWhenAsked: a status reads no app's counters
// unless it has "usage": true; then each running app's.
func TestStatusReadsUsageOnlyWhenAsked(t *testing.T) {
	ts := startServer(t, newFakeApps("a", "b", "idle"), nil)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := ts.client.Do(ctx, control.OpStart, control.AppArgs{App: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reads := func() int {
		ts.apps.mu.Lock()
		defer ts.apps.mu.Unlock()
		return ts.apps.usageReads
	}
	var d control.StatusData
	if err := ts.client.Do(ctx, control.OpStatus, control.StatusArgs{}, &d); err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Apps {
		if a.Usage != nil {
			t.Errorf("%s: usage %+v in a status that did not ask", a.ID, a.Usage)
		}
	}
	if n := reads(); n != 0 {
		t.Fatalf("a status without usage read the counters %d times", n)
	}
	if err := ts.client.Do(ctx, control.OpStatus, control.StatusArgs{Usage: true}, &d); err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Apps {
		if (a.Usage != nil) != (a.ID != "idle") {
			t.Errorf("%s (%s): usage %+v", a.ID, a.State, a.Usage)
		}
	}
	if n := reads(); n != 2 {
		t.Fatalf("a status with usage read the counters %d times, want 2 (the running apps)", n)
	}
}

func TestLogsFitInALine(t *testing.T) {
	ts := startServer(t, newFakeApps("big"), nil)
	big := strings.Repeat("b", 4000)
	for i := range 400 { // 1.6 MB of output
		ts.apps.write("big", fmt.Sprintf("%03d %s", i, big))
	}
	var d control.LogsData
	if err := ts.client.Do(context.Background(), control.OpLogs, control.LogsArgs{App: "big", Lines: 1000}, &d); err != nil {
		t.Fatal(err)
	}
	if !d.Truncated || len(d.Lines) == 0 || len(d.Lines) >= 400 {
		t.Fatalf("%d lines, truncated %v: want fewer than 400, truncated", len(d.Lines), d.Truncated)
	}
	if last := d.Lines[len(d.Lines)-1].Text; !strings.HasPrefix(last, "399 ") {
		t.Fatalf("the newest line is missing; last is %.10q", last)
	}
}

// FuzzReadRequestLine: lines come back whole and in order up to the cap,
// longer ones are reported and skipped, and nothing is lost between.
func FuzzReadRequestLine(f *testing.F) {
	f.Add([]byte("a\nbb\n"), 4)
	f.Add([]byte("toolongline\nok\n"), 4)
	f.Add([]byte("exactly4\n1234\n12345\n"), 4)
	f.Add([]byte("no newline at the end"), 64)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, input []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		r := bufio.NewReaderSize(bytes.NewReader(input), 16)
		var want [][]byte
		parts := bytes.SplitAfter(input, []byte("\n"))
		for _, p := range parts {
			if len(p) > 0 {
				want = append(want, p)
			}
		}
		for i := 0; ; i++ {
			line, tooLong, err := readRequestLine(r, max)
			if i >= len(want) {
				if err == nil || len(line) > 0 || tooLong {
					t.Fatalf("extra line %q (too long %v, err %v)", line, tooLong, err)
				}
				return
			}
			w := bytes.TrimSuffix(want[i], []byte("\n"))
			if len(w) > max {
				if !tooLong || line != nil {
					t.Fatalf("line %d of %d bytes (max %d) not reported too long", i, len(w), max)
				}
			} else if tooLong || !bytes.Equal(line, w) {
				t.Fatalf("line %d = %q (too long %v), want %q", i, line, tooLong, w)
			}
			if err != nil {
				if i != len(want)-1 {
					t.Fatalf("error %v at line %d of %d", err, i, len(want))
				}
				return
			}
		}
	})
}

// TestStateEventBeforeItsAnswer: on a connection subscribed to state,
// the event of the state a start, stop or restart answers comes before
// that answer, every time.
func TestStateEventBeforeItsAnswer(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	c := dialRaw(t, ts.path)
	c.send(`{"id":1,"op":"subscribe","args":{"topics":["state"]}}`)
	if resp := c.response(); !resp.OK {
		t.Fatalf("subscribe: %+v", resp.Error)
	}
	ops := []struct{ op, state string }{{"start", "running"}, {"stop", "stopped"}, {"restart", "running"}, {"stop", "stopped"}}
	for i := range 400 {
		o := ops[i%len(ops)]
		id := int64(i + 2)
		c.send(fmt.Sprintf(`{"id":%d,"op":%q,"args":{"app":"a"}}`, id, o.op))
		sawEvent := false
		for {
			line := c.line()
			var probe struct {
				Event *string `json:"event"`
				State string  `json:"state"`
				ID    int64   `json:"id"`
			}
			mustUnmarshal(t, line, &probe)
			if probe.Event != nil {
				sawEvent = sawEvent || probe.State == o.state
				continue
			}
			if probe.ID != id {
				t.Fatalf("%s: answer %s, want id %d", o.op, line, id)
			}
			if !sawEvent {
				t.Fatalf("round %d: the answer to %s came before the %s event: %s", i, o.op, o.state, line)
			}
			break
		}
	}
}
