package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// floodApp (DAEMON_TEST_HUBAPP=flood) opens a session, then sends
// session.open and turn.start requests as fast as its hub takes them,
// reading (and dropping) what comes back, until the hub closes.
func floodApp() int {
	hub := os.NewFile(3, "hub")
	w := bufio.NewWriter(hub)
	send := func(reqID, method string, args any) bool {
		b, _ := json.Marshal(map[string]any{"octos_peer": map[string]any{"type": "request", "req_id": reqID, "method": method, "args": args}})
		w.Write(append(b, '\n'))
		return w.Flush() == nil
	}
	send("open-0", "octos.session.open", map[string]any{})
	sc := bufio.NewScanner(hub)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ctxID string
	for ctxID == "" && sc.Scan() {
		var f struct {
			Peer struct {
				Data struct {
					ContextID string `json:"context_id"`
				} `json:"data"`
			} `json:"octos_peer"`
		}
		json.Unmarshal(sc.Bytes(), &f)
		ctxID = f.Peer.Data.ContextID
	}
	go func() {
		for sc.Scan() {
		}
	}()
	for i := 0; ; i++ {
		ok := send(fmt.Sprint("o", i), "octos.session.open", map[string]any{"title": fmt.Sprint("t", i%50)}) &&
			send(fmt.Sprint("t", i), "octos.turn.start", map[string]any{"context_id": ctxID, "input": "x"})
		if !ok {
			return 0
		}
	}
}

const floodManifest = `{
  "version": 1,
  "apps": [{
    "id": "flood",
    "exec": [%[1]q],
    "autostart": true,
    "env": {"DAEMON_TEST_HUBAPP": "flood"},
    "grants": {"services": ["agent.octos"], "methods": ["octos.session.open", "octos.turn.start"]},
    "sandbox": {"policy": "broad", "network": "full"},
    "storage": {}
  }, {
    "id": "chat",
    "exec": [%[1]q],
    "autostart": true,
    "env": {"DAEMON_TEST_HUBAPP": "1"},
    "grants": {"services": ["agent.octos"], "methods": ["octos.session.open", "octos.turn.start", "octos.turn.interrupt"]},
    "sandbox": {"policy": "broad", "network": "full"},
    "storage": {}
  }]
}`

// kconn is a control connection spoken line by line, for tests that
// pipeline requests without waiting for answers.
type kconn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialKernel(t *testing.T, path string) *kconn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &kconn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *kconn) line() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("control read: %v", err)
	}
	return line
}

// attach sends kernel.attach and returns the first line after it, which
// must be its answer.
func (c *kconn) attach() string {
	c.t.Helper()
	fmt.Fprintf(c.nc, `{"id":1,"op":"kernel.attach","args":{}}`+"\n")
	return c.line()
}

// untilRequest reads until the kernel is handed app's request reqID.
func (c *kconn) untilRequest(app, reqID string) {
	c.t.Helper()
	for {
		line := c.line()
		if strings.Contains(line, `"event":"request"`) && strings.Contains(line, `"app":"`+app+`"`) &&
			(reqID == "" || strings.Contains(line, `"req_id":"`+reqID+`"`)) {
			return
		}
	}
}

// TestKernelOpsInOrder: a kernel that writes its reply and 60 events in
// one write, without waiting for answers, has every one accepted and the
// app sees them in that order.
func TestKernelOpsInOrder(t *testing.T) {
	env, d, sub := hubDaemon(t, hubAppManifest)
	logs := followLogs(t, d.client, "chat")
	a := pendingConsent(t, d.client, sub, "chat")
	k := dialKernel(t, env.dirs.ControlSocket())
	if line := k.attach(); !strings.Contains(line, `"ok":true`) {
		t.Fatalf("kernel.attach: %s", line)
	}
	allow(t, d.client, a)
	k.untilRequest("chat", "turn-1")
	var b strings.Builder
	b.WriteString(`{"id":2,"op":"request.reply","args":{"app":"chat","req_id":"turn-1","ok":true,"data":{"turn_id":"t1"}}}` + "\n")
	const n = 60
	for i := range n {
		fmt.Fprintf(&b, `{"id":%d,"op":"request.event","args":{"app":"chat","req_id":"turn-1","event":{"type":"delta","n":%d}}}`+"\n", 3+i, i)
	}
	if _, err := k.nc.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	for i := range n + 1 {
		if line := k.line(); !strings.Contains(line, fmt.Sprintf(`{"id":%d,"ok":true`, 2+i)) {
			t.Fatalf("answer %d: %s", 2+i, line)
		}
	}
	for i := range n {
		appSaw(t, logs, `"type":"event"`, fmt.Sprintf(`"n":%d}`, i))
	}
}

// TestKernelAttachAnswerFirst: with requests streaming in, nothing a
// kernel is handed precedes the answer to its kernel.attach.
func TestKernelAttachAnswerFirst(t *testing.T) {
	env, d, sub := hubDaemon(t, floodManifest)
	allow(t, d.client, pendingConsent(t, d.client, sub, "flood"))
	for attached := 0; attached < 20; {
		k := dialKernel(t, env.dirs.ControlSocket())
		line := k.attach()
		switch {
		case strings.Contains(line, `"kernel_attached"`):
			// The last one's connection is not torn down yet.
		case strings.HasPrefix(line, `{"id":1,"ok":true`):
			attached++
			k.untilRequest("flood", "") // requests do flow to it
		default:
			t.Fatalf("first line after kernel.attach: %.200s", line)
		}
		k.nc.Close()
	}
}

// TestFloodKeepsTheDaemonResponsive: an app that floods session.open and
// turn.start (a kernel attached answers nothing) does not stop status
// from answering or another app from being served.
func TestFloodKeepsTheDaemonResponsive(t *testing.T) {
	env, d, sub := hubDaemon(t, floodManifest)
	ctx := context.Background()
	logs := followLogs(t, d.client, "chat")
	k := dialKernel(t, env.dirs.ControlSocket())
	k.attach()
	a := pendingConsent(t, d.client, sub, "flood")
	allow(t, d.client, a)
	k.untilRequest("flood", "t1")
	for range 5 {
		var st control.StatusData
		if err := d.client.Do(ctx, control.OpStatus, nil, &st); err != nil || len(st.Apps) != 2 {
			t.Fatalf("status during the flood: %v %+v", err, st)
		}
	}
	c := pendingConsent(t, d.client, sub, "chat")
	allow(t, d.client, c)
	appSaw(t, logs, `"req_id":"open-1"`, `"ok":true`)
	k.untilRequest("chat", "turn-1")
}

// TestKernelDetachMidTurnOverTheSocket: a kernel whose connection closes
// in the middle of a turn ends that turn for the app (turn.end,
// kernel_detached), and the next kernel may attach at once.
func TestKernelDetachMidTurnOverTheSocket(t *testing.T) {
	_, d, sub := hubDaemon(t, hubAppManifest)
	ctx := context.Background()
	logs := followLogs(t, d.client, "chat")
	a := pendingConsent(t, d.client, sub, "chat")
	kernel, err := d.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := kernel.Do(ctx, control.OpKernelAttach, nil, nil); err != nil {
		t.Fatal(err)
	}
	allow(t, d.client, a)
	for ev := nextEvent(t, kernel); ev.Name != control.EventRequest; ev = nextEvent(t, kernel) {
	}
	if err := kernel.Do(ctx, control.OpRequestReply, peer.KernelReply{App: "chat", ReqID: "turn-1", OK: true, Data: json.RawMessage(`{"turn_id":"t1"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := kernel.Do(ctx, control.OpRequestEvent, peer.KernelEvent{App: "chat", ReqID: "turn-1", Event: json.RawMessage(`{"type":"delta","text":"half"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	appSaw(t, logs, `"text":"half"`)
	kernel.Close()
	appSaw(t, logs, `"type":"event"`, `"req_id":"turn-1"`, `"turn.end"`, `"kernel_detached"`)
	// Detached when its connection ended: a new kernel is not refused.
	k2, err := d.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	if err := k2.Do(ctx, control.OpKernelAttach, nil, nil); err != nil {
		t.Fatalf("kernel.attach after the first kernel's connection ended: %v", err)
	}
}

// TestConsentSurvivesSIGKILL: a daemon process killed right after approve
// answered ok has the decision on disk: a new daemon does not ask.
func TestConsentSurvivesSIGKILL(t *testing.T) {
	exe, _ := os.Executable()
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(hubAppManifest, exe)))
	cmd := exec.Command(exe)
	exited, stderr := startDaemonProcess(t, env, cmd)

	c := &control.Client{Path: env.dirs.ControlSocket()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sub *control.Conn
	var err error
	for sub, err = c.Subscribe(ctx, control.TopicApproval); err != nil; sub, err = c.Subscribe(ctx, control.TopicApproval) {
		select { // no event says the socket is up: poll it with a deadline
		case <-ctx.Done():
			t.Fatalf("the daemon process did not serve: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	defer sub.Close()
	a := pendingConsent(t, c, sub, "chat")
	if err := c.Do(ctx, control.OpApprove, control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow"}, nil); err != nil {
		t.Fatalf("approve: %v\n%s", err, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited

	d := startDaemon(t, env) // waits for the state file's lock
	var cons control.ConsentData
	if err := d.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "list", App: "chat"}, &cons); err != nil ||
		len(cons.Consents) != 1 || cons.Consents[0].Decision != string(policy.Allow) {
		t.Fatalf("consent after SIGKILL: %v %+v", err, cons)
	}
	logs := followLogs(t, d.client, "chat")
	appSaw(t, logs, `"req_id":"turn-1"`, `no_kernel`) // served without asking
	var list control.ApprovalsData
	if err := d.client.Do(ctx, control.OpApprovals, nil, &list); err != nil || len(list.Approvals) != 0 {
		t.Fatalf("approvals after the restart: %v %+v", err, list)
	}
}
