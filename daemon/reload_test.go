package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer"
)

// netApp is the app of TestReloadNarrowsARunningApp (DAEMON_TEST_NETAPP):
// it connects to NETAPP_ADDR once, prints "netapp PID connect ok" and
// holds the connection, or prints "netapp PID connect ERRNO", then
// sleeps until it is stopped.
func netApp() int {
	c, err := net.Dial("tcp", os.Getenv("NETAPP_ADDR"))
	var errno syscall.Errno
	switch {
	case err == nil:
		fmt.Printf("netapp %d connect ok\n", os.Getpid())
	case errors.As(err, &errno):
		fmt.Printf("netapp %d connect %s\n", os.Getpid(), errnoName(errno))
	default:
		fmt.Printf("netapp %d connect %v\n", os.Getpid(), err)
	}
	if c != nil {
		defer c.Close() // held open while the process runs
	}
	for {
		time.Sleep(time.Hour)
	}
}

// reloadRig is a daemon whose manifest comes from testdata/reload-*.json,
// with this test binary as the app and a TCP listener the app may be
// granted.
type reloadRig struct {
	t     *testing.T
	env   testEnv
	d     *runningDaemon
	ln    net.Listener
	conns chan net.Conn
	logs  *logFollow
}

func newReloadRig(t *testing.T, manifest, app string) *reloadRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &reloadRig{t: t, env: newTestEnv(t), ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.conns <- c
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-r.conns:
				c.Close()
			default:
				return
			}
		}
	})
	r.write(manifest)
	r.d = startDaemon(t, r.env)
	r.logs = followLogs(t, r.d.client, app)
	return r
}

// write installs testdata/name as the manifest.
func (r *reloadRig) write(name string) {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		r.t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	port := strconv.Itoa(r.ln.Addr().(*net.TCPAddr).Port)
	r.env.writeManifest(r.t, []byte(strings.NewReplacer("@EXE@", exe, "@PORT@", port).Replace(string(b))))
}

func (r *reloadRig) reload(keep bool) control.ReloadData {
	r.t.Helper()
	var rd control.ReloadData
	if err := r.d.client.Do(context.Background(), control.OpReload, control.ReloadArgs{KeepRunning: keep}, &rd); err != nil {
		r.t.Fatalf("reload (keep_running %v): %v", keep, err)
	}
	return rd
}

func (r *reloadRig) web() control.AppStatus {
	r.t.Helper()
	return status(r.t, r.d.client)["web"]
}

// connected waits for the app's process pid to say how its connect went
// and returns what it said: "ok" (and the connection it made) or an errno.
func (r *reloadRig) connected(pid int) (string, net.Conn) {
	r.t.Helper()
	line := appSaw(r.t, r.logs, fmt.Sprintf("netapp %d connect ", pid))
	got := strings.TrimPrefix(line, fmt.Sprintf("netapp %d connect ", pid))
	if got != "ok" {
		return got, nil
	}
	select {
	case c := <-r.conns:
		r.t.Cleanup(func() { c.Close() })
		return got, c
	case <-time.After(30 * time.Second):
		r.t.Fatal("the app said it connected, but no connection came")
	}
	panic("unreachable")
}

// closedByPeer waits for the app's end of c to close (its process died).
func closedByPeer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %v, want its end closed", what, err)
	}
}

// changesOf lists a reload's changes as "app: part,part (state)".
func changesOf(list []control.AppChange) []string {
	var out []string
	for _, c := range list {
		out = append(out, fmt.Sprintf("%s: %s (%s)", c.App, strings.Join(c.Changed, ","), c.State))
	}
	return out
}

// TestReloadNarrowsARunningApp: narrowing a running app's network in the
// manifest and reloading restarts it, and its new jail refuses what the
// old one allowed (the old connection dies with the old process); the
// same manifest reformatted restarts nothing; with keep_running the app
// keeps its process, marked stale, until it is restarted.
func TestReloadNarrowsARunningApp(t *testing.T) {
	r := newReloadRig(t, "reload-tcp.json", "web")
	first := r.web()
	if first.State != "running" {
		t.Fatalf("web: %+v", first)
	}
	ok, conn := r.connected(first.Pid)
	if ok != "ok" {
		t.Fatalf("with network tcp the app's connect: %s", ok)
	}

	// Reformatted: nothing restarts.
	r.write("reload-tcp-reformatted.json")
	if rd := r.reload(false); len(rd.Restarted)+len(rd.Stale)+len(rd.Added)+len(rd.Removed) != 0 || rd.Apps != 1 {
		t.Fatalf("a reformatted manifest: %+v", rd)
	}
	if st := r.web(); st.Pid != first.Pid || len(st.Stale) != 0 {
		t.Fatalf("after a reformatted manifest: %+v, want pid %d", st, first.Pid)
	}

	// Narrowed with keep_running: the process stays, marked stale.
	r.write("reload-none.json")
	rd := r.reload(true)
	if want := []string{"web: jail (running)"}; !slices.Equal(changesOf(rd.Stale), want) || len(rd.Restarted) != 0 || rd.Stale[0].Pid != first.Pid {
		t.Fatalf("keep_running: %+v, want stale %q", rd, want)
	}
	if st := r.web(); st.Pid != first.Pid || !slices.Equal(st.Stale, []string{"jail"}) {
		t.Fatalf("status after keep_running: %+v, want pid %d, stale [jail]", st, first.Pid)
	}
	// Restarted, it runs the new entry: no network.
	var sd control.StateData
	if err := r.d.client.Do(context.Background(), control.OpRestart, control.AppArgs{App: "web"}, &sd); err != nil {
		t.Fatalf("restart web: %v", err)
	}
	if sd.App.Pid == first.Pid || len(sd.App.Stale) != 0 || len(r.web().Stale) != 0 {
		t.Fatalf("restarted: %+v, want a new pid and no stale mark", sd.App)
	}
	closedByPeer(t, conn, "the connection of the restarted process")
	if got, _ := r.connected(sd.App.Pid); got != "EPERM" && got != "EACCES" {
		t.Fatalf("with network none the app's connect: %s, want refused", got)
	}

	// Widened and narrowed again by plain reloads: each restarts it.
	r.write("reload-tcp.json")
	rd = r.reload(false)
	if want := []string{"web: jail (running)"}; !slices.Equal(changesOf(rd.Restarted), want) || rd.Restarted[0].Pid == sd.App.Pid {
		t.Fatalf("widened: %+v, want restarted %q with a new pid", rd, want)
	}
	wide := rd.Restarted[0].Pid
	ok, conn = r.connected(wide)
	if ok != "ok" {
		t.Fatalf("widened, the app's connect: %s", ok)
	}
	r.write("reload-none.json")
	rd = r.reload(false)
	if want := []string{"web: jail (running)"}; !slices.Equal(changesOf(rd.Restarted), want) || rd.Restarted[0].Pid == wide {
		t.Fatalf("narrowed: %+v, want restarted %q with a new pid", rd, want)
	}
	closedByPeer(t, conn, "the connection the old jail allowed")
	if alive(wide) {
		t.Errorf("the process of the wide jail (%d) outlived the reload", wide)
	}
	narrow := rd.Restarted[0].Pid
	if got, _ := r.connected(narrow); got != "EPERM" && got != "EACCES" {
		t.Fatalf("narrowed, the app's connect: %s, want refused", got)
	}
	if st := r.web(); st.Pid != narrow || st.State != "running" {
		t.Fatalf("status after the narrowing reload: %+v, want pid %d", st, narrow)
	}
}

// grantApp is the app of TestReloadNarrowsGrantsLive
// (DAEMON_TEST_GRANTAPP): it prints every line its hub brings ("got
// LINE"), sends the request a pass-through frame {"do": "request",
// "req_id", "method", "args"} asks for, and answers each tool call ok.
func grantApp() int {
	hub := os.NewFile(3, "hub")
	sc := bufio.NewScanner(hub)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Printf("got %s\n", sc.Bytes())
		var f struct {
			Do     string          `json:"do"`
			ReqID  string          `json:"req_id"`
			Method string          `json:"method"`
			Args   json.RawMessage `json:"args"`
			Peer   struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			} `json:"octos_peer"`
		}
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			continue
		}
		var out any
		switch {
		case f.Do == "request":
			out = map[string]any{"octos_peer": map[string]any{"type": "request", "req_id": f.ReqID, "method": f.Method, "args": f.Args}}
		case f.Peer.Type == "tool_call":
			out = map[string]any{"octos_peer": map[string]any{"type": "tool_result", "call_id": f.Peer.CallID, "ok": true}}
		default:
			continue
		}
		b, _ := json.Marshal(out)
		if _, err := hub.Write(append(b, '\n')); err != nil {
			fmt.Fprintln(os.Stderr, "hub write:", err)
			return 1
		}
	}
	return 0
}

// ask has the app send a request, by a pass-through frame.
func (r *reloadRig) ask(reqID, method string, args any) {
	r.t.Helper()
	frame, _ := json.Marshal(map[string]any{"do": "request", "req_id": reqID, "method": method, "args": args})
	if err := r.d.client.Do(context.Background(), control.OpAppSend, control.AppSendArgs{App: "chat", Frame: frame}, nil); err != nil {
		r.t.Fatalf("app.send: %v", err)
	}
}

// TestReloadNarrowsGrantsLive: a reload that takes a method and a tool
// away from a running app refuses its next request and the next call of
// that tool on the link it has, without restarting it.
func TestReloadNarrowsGrantsLive(t *testing.T) {
	r := newReloadRig(t, "reload-grants.json", "chat")
	ctx := context.Background()
	sub := approvalEvents(t, r.d.client)
	pid := status(t, r.d.client)["chat"].Pid

	r.ask("o1", "octos.session.open", map[string]any{})
	allow(t, r.d.client, pendingConsent(t, r.d.client, sub, "chat"))
	line := appSaw(t, r.logs, `"type":"reply"`, `"req_id":"o1"`, `"ok":true`)
	var reply struct {
		Peer struct {
			Data struct {
				ContextID string `json:"context_id"`
			} `json:"data"`
		} `json:"octos_peer"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "got ")), &reply); err != nil || reply.Peer.Data.ContextID == "" {
		t.Fatalf("session.open reply %q: %v", line, err)
	}
	contextID := reply.Peer.Data.ContextID

	kernel, err := r.d.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close()
	if err := kernel.Do(ctx, control.OpKernelAttach, nil, nil); err != nil {
		t.Fatalf("kernel.attach: %v", err)
	}
	call := func(id, tool string) error {
		return kernel.Do(ctx, control.OpToolCall, control.ToolCallArgs{App: "chat", Call: control.ToolCall{
			CallID: id, Name: tool, Risk: control.RiskRead, Confirm: control.ConfirmNone, TimeoutMS: 30000, ContextID: contextID, Caller: "kernel",
		}}, nil)
	}
	if err := call("k1", "chat.echo"); err != nil {
		t.Fatalf("tool.call before the reload: %v", err)
	}
	appSaw(t, r.logs, `"type":"tool_call"`, `"call_id":"k1"`)
	r.ask("h1", "octos.session.history", map[string]any{"context_id": contextID})
	appSaw(t, r.logs, `"req_id":"h1"`, `"ok":true`)

	r.write("reload-grants-narrowed.json")
	if rd := r.reload(false); len(rd.Restarted)+len(rd.Stale) != 0 {
		t.Fatalf("a grants-only change restarted %+v", rd)
	}
	if err := call("k2", "chat.echo"); codeOf(err) != peer.CodeDeclined {
		t.Fatalf("tool.call of a tool the reload took away: %v, want %s", err, peer.CodeDeclined)
	}
	if err := call("k3", "chat.other"); err != nil {
		t.Fatalf("tool.call of a tool still granted: %v", err)
	}
	r.ask("h2", "octos.session.history", map[string]any{"context_id": contextID})
	appSaw(t, r.logs, `"req_id":"h2"`, `"not_granted"`)
	if st := status(t, r.d.client)["chat"]; st.Pid != pid || !st.Link.Connected || st.Link.Contexts != 1 {
		t.Fatalf("after the reload: %+v, want the same process (pid %d) on its link, its context open", st, pid)
	}
}
