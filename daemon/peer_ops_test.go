package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// hubApp is the app of the peer-link tests (the test binary, chosen by
// DAEMON_TEST_HUBAPP): it opens a session, starts a turn on it once the
// session is there, and prints every frame it is sent, so the test reads
// what the app saw in its log.
func hubApp() int {
	hub := os.NewFile(3, "hub")
	send := func(reqID, method string, args any) {
		b, _ := json.Marshal(map[string]any{"octos_peer": map[string]any{
			"type": "request", "req_id": reqID, "method": method, "args": args,
		}})
		if _, err := hub.Write(append(b, '\n')); err != nil {
			fmt.Fprintln(os.Stderr, "hub write:", err)
			os.Exit(1)
		}
	}
	send("open-1", "octos.session.open", map[string]any{"title": "e2e"})
	sc := bufio.NewScanner(hub)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Printf("got %s\n", sc.Bytes())
		var f struct {
			Peer struct {
				Type  string `json:"type"`
				ReqID string `json:"req_id"`
				OK    bool   `json:"ok"`
				Data  struct {
					ContextID string `json:"context_id"`
				} `json:"data"`
			} `json:"octos_peer"`
		}
		if json.Unmarshal(sc.Bytes(), &f) == nil && f.Peer.Type == "reply" && f.Peer.ReqID == "open-1" && f.Peer.OK {
			send("turn-1", "octos.turn.start", map[string]any{"context_id": f.Peer.Data.ContextID, "input": "hi"})
		}
	}
	return 0
}

const hubAppManifest = `{
  "version": 1,
  "apps": [{
    "id": "chat",
    "exec": [%q],
    "autostart": true,
    "env": {"DAEMON_TEST_HUBAPP": "1"},
    "grants": {"services": ["agent.octos"], "methods": ["octos.session.open", "octos.turn.start", "octos.turn.interrupt"]},
    "sandbox": {"policy": "broad", "network": "full"},
    "storage": {}
  }]
}`

// appSaw waits until the app printed a frame that contains every part.
func appSaw(t *testing.T, logs *logFollow, parts ...string) string {
	t.Helper()
	for {
		var text string
		if len(logs.backlog) > 0 {
			text, logs.backlog = logs.backlog[0].Text, logs.backlog[1:]
		} else {
			ev := nextEvent(t, logs.conn)
			var l control.LogLine
			if err := ev.Decode(&l); err != nil || ev.Name != control.TopicLog {
				continue
			}
			text = l.Text
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(text, p)
		}
		if all {
			return text
		}
	}
}

// logFollow is logs -f of an app: the lines it had when the follow
// began (an autostart app may have said what a test waits for before
// the test could follow it), then the stream's.
type logFollow struct {
	conn    *control.Conn
	backlog []control.LogLine
}

func followLogs(t *testing.T, c *control.Client, app string) *logFollow {
	t.Helper()
	var d control.LogsData
	logs, err := c.Stream(context.Background(), control.OpLogs, control.LogsArgs{App: app, Lines: 100, Follow: true}, &d)
	if err != nil {
		t.Fatalf("logs -f %s: %v", app, err)
	}
	t.Cleanup(func() { logs.Close() })
	return &logFollow{conn: logs, backlog: d.Lines}
}

// pendingConsent returns the consent approval of app: one already
// pending, or the next one raised. Subscribing first and listing second
// leaves no gap between the two.
func pendingConsent(t *testing.T, c *control.Client, sub *control.Conn, app string) control.Approval {
	t.Helper()
	var list control.ApprovalsData
	if err := c.Do(context.Background(), control.OpApprovals, nil, &list); err != nil {
		t.Fatalf("approvals: %v", err)
	}
	for _, a := range list.Approvals {
		if a.App == app && a.Kind == "consent" {
			return a
		}
	}
	for {
		ev := nextEvent(t, sub)
		var a control.Approval
		if ev.Name == control.TopicApproval && ev.Decode(&a) == nil && a.App == app && a.State == "pending" {
			return a
		}
	}
}

// hubDaemon starts a daemon on a fresh tree whose manifest is the format
// manifest with this test binary (which runs as the hub apps, see
// hubApp) as its %[1]q, and subscribes to the daemon's approval events.
func hubDaemon(t *testing.T, manifest string) (testEnv, *runningDaemon, *control.Conn) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(manifest, exe)))
	d := startDaemon(t, env)
	return env, d, approvalEvents(t, d.client)
}

// approvalEvents subscribes to c's approval events until the test ends.
func approvalEvents(t *testing.T, c *control.Client) *control.Conn {
	t.Helper()
	sub, err := c.Subscribe(context.Background(), control.TopicApproval)
	if err != nil {
		t.Fatalf("subscribe to approvals: %v", err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// allow approves a (the person's "allow").
func allow(t *testing.T, c *control.Client, a control.Approval) {
	t.Helper()
	if err := c.Do(context.Background(), control.OpApprove, control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow"}, nil); err != nil {
		t.Fatalf("approve %s (%s of %s): %v", a.ApprovalID, a.Kind, a.App, err)
	}
}

// TestPeerLinkThroughTheDaemon drives the peer link the way the shell and
// a kernel do, over the real control socket, with a real app on a real
// hub: first-use consent answered with approve, a turn streamed from an
// attached kernel, the decision surviving a restart of the daemon, and
// revoke asking again.
func TestPeerLinkThroughTheDaemon(t *testing.T) {
	env, d, sub := hubDaemon(t, hubAppManifest)
	ctx := context.Background()
	logs := followLogs(t, d.client, "chat")
	a := pendingConsent(t, d.client, sub, "chat")
	if a.Method != "octos.session.open" {
		t.Errorf("the consent approval names method %q, want the request that raised it", a.Method)
	}

	kernel, err := d.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close()
	if err := kernel.Do(ctx, control.OpKernelAttach, nil, nil); err != nil {
		t.Fatalf("kernel.attach: %v", err)
	}
	second, err := d.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Do(ctx, control.OpKernelAttach, nil, nil); codeOf(err) != "kernel_attached" {
		t.Errorf("a second kernel.attach: %v, want kernel_attached", err)
	}
	if err := second.Do(ctx, control.OpRequestReply, peer.KernelReply{App: "chat", ReqID: "turn-1", OK: true}, nil); codeOf(err) != control.CodeNotAttached {
		t.Errorf("request.reply from a connection that is not the kernel: %v, want %s", err, control.CodeNotAttached)
	}
	second.Close()

	allow(t, d.client, a)
	contextLine := appSaw(t, logs, `"req_id":"open-1"`, `"ok":true`)

	// The turn reaches the kernel with the context and account from the
	// daemon's records; its reply and events reach the app in order.
	var req peer.KernelRequest
	for {
		ev := nextEvent(t, kernel)
		if ev.Name == control.EventRequest {
			if err := ev.Decode(&req); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if req.App != "chat" || req.ReqID != "turn-1" || req.Method != "octos.turn.start" || req.ContextID == "" || !strings.Contains(contextLine, req.ContextID) {
		t.Fatalf("kernel request %+v; the app's session reply was %s", req, contextLine)
	}
	reply := peer.KernelReply{App: "chat", ReqID: "turn-1", OK: true, Data: json.RawMessage(`{"turn_id":"t1"}`)}
	if err := kernel.Do(ctx, control.OpRequestReply, reply, nil); err != nil {
		t.Fatalf("request.reply: %v", err)
	}
	for _, e := range []string{`{"type":"delta","text":"hello"}`, `{"type":"turn.end","turn_id":"t1","reason":"completed"}`} {
		if err := kernel.Do(ctx, control.OpRequestEvent, peer.KernelEvent{App: "chat", ReqID: "turn-1", Event: json.RawMessage(e)}, nil); err != nil {
			t.Fatalf("request.event %s: %v", e, err)
		}
	}
	appSaw(t, logs, `"type":"reply"`, `"req_id":"turn-1"`, `"turn_id":"t1"`)
	appSaw(t, logs, `"type":"event"`, `"text":"hello"`)
	appSaw(t, logs, `"type":"event"`, `"turn.end"`)

	var cons control.ConsentData
	if err := d.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "list"}, &cons); err != nil || len(cons.Consents) != 1 || cons.Consents[0].App != "chat" || cons.Consents[0].Decision != string(policy.Allow) {
		t.Fatalf("consent list: %v %+v", err, cons)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("stop the first daemon: %v", err)
	}

	// A second daemon on the same state: the decision holds, no prompt;
	// with no kernel the turn fails no_kernel.
	d2 := startDaemon(t, env)
	logs2 := followLogs(t, d2.client, "chat")
	appSaw(t, logs2, `"req_id":"turn-1"`, `no_kernel`)
	var list control.ApprovalsData
	if err := d2.client.Do(ctx, control.OpApprovals, nil, &list); err != nil || len(list.Approvals) != 0 {
		t.Fatalf("approvals after a restart with consent given: %v %+v", err, list)
	}

	// Revoked, the next start asks again.
	var rev control.ConsentData
	if err := d2.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "revoke", App: "chat"}, &rev); err != nil || rev.Revoked == nil || !*rev.Revoked {
		t.Fatalf("consent revoke: %v %+v", err, rev)
	}
	sub2 := approvalEvents(t, d2.client)
	if err := d2.client.Do(ctx, control.OpRestart, control.AppArgs{App: "chat"}, nil); err != nil {
		t.Fatalf("restart chat: %v", err)
	}
	pendingConsent(t, d2.client, sub2, "chat")
}

// TestPeerOpsRefuseBadArgs: each op names what is missing.
func TestPeerOpsRefuseBadArgs(t *testing.T) {
	env := newTestEnv(t)
	env.installManifest(t, "two-apps.json")
	d := startDaemon(t, env)
	ctx := context.Background()
	for _, tc := range []struct {
		op   string
		args any
		code string
	}{
		{control.OpApprove, control.ApproveArgs{Decision: "allow"}, control.CodeBadRequest},
		{control.OpApprove, control.ApproveArgs{ApprovalID: "x", Decision: "maybe"}, control.CodeBadRequest},
		{control.OpApprove, control.ApproveArgs{ApprovalID: "nope", Decision: "allow"}, "unknown_approval"},
		{control.OpApprove, map[string]any{"approval_id": "x", "decision": "allow", "app": "spoof"}, control.CodeBadRequest},
		{control.OpConsent, control.ConsentArgs{Action: "forget"}, control.CodeBadRequest},
		{control.OpConsent, control.ConsentArgs{Action: "revoke"}, control.CodeBadRequest},
		{control.OpAppSend, control.AppSendArgs{App: "talker"}, control.CodeBadRequest},
		{control.OpAppSend, control.AppSendArgs{App: "idle", Frame: json.RawMessage(`{"x":1}`)}, "not_connected"},
		{control.OpAppSend, control.AppSendArgs{App: "idle", Frame: json.RawMessage(`{"octos_peer":{}}`)}, control.CodeBadRequest},
		{control.OpRequestEvent, peer.KernelEvent{App: "talker", ReqID: "r", Event: json.RawMessage(`{}`)}, control.CodeNotAttached},
	} {
		err := d.client.Do(ctx, tc.op, tc.args, nil)
		if codeOf(err) != tc.code {
			t.Errorf("%s %+v: %v, want code %s", tc.op, tc.args, err, tc.code)
		}
		// Said once, and about this repository only: the client adds
		// its own prefix.
		if msg := err.Error(); strings.Count(msg, tc.op) > 1 || strings.Contains(msg, "§") || strings.Contains(msg, "SP"+"EC") {
			t.Errorf("%s: the message stutters or points outside: %q", tc.op, msg)
		}
	}
}

// TestApproveRememberIsForTools: a consent answer is always kept, so
// remember is refused for one, naming why, and the question stays
// pending for a proper answer.
func TestApproveRememberIsForTools(t *testing.T) {
	_, d, sub := hubDaemon(t, hubAppManifest)
	ctx := context.Background()
	a := pendingConsent(t, d.client, sub, "chat")
	err := d.client.Do(ctx, control.OpApprove, control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow", Remember: true}, nil)
	var cerr *control.Error
	if !errors.As(err, &cerr) || cerr.Code != control.CodeBadRequest || !strings.Contains(cerr.Message, "a consent answer is always kept, until consent revoke") {
		t.Fatalf("approve a consent with remember: %v, want bad_request saying consent is always kept", err)
	}
	// remember: false too: the member is refused whatever its value
	// (it was accepted and the consent kept).
	raw := json.RawMessage(`{"approval_id":"` + a.ApprovalID + `","decision":"allow","remember":false}`)
	if err := d.client.Do(ctx, control.OpApprove, raw, nil); !errors.As(err, &cerr) || cerr.Code != control.CodeBadRequest {
		t.Fatalf("approve a consent with remember false: %v, want bad_request", err)
	}
	var list control.ApprovalsData
	if err := d.client.Do(ctx, control.OpApprovals, nil, &list); err != nil || len(list.Approvals) != 1 || list.Approvals[0].ApprovalID != a.ApprovalID {
		t.Fatalf("approvals after the refusal: %v %+v, want %s still pending", err, list, a.ApprovalID)
	}
	var cons control.ConsentData
	if err := d.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "list"}, &cons); err != nil || len(cons.Consents) != 0 {
		t.Fatalf("consent list after the refusal: %v %+v, want nothing kept", err, cons)
	}
	allow(t, d.client, a)
	if err := d.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "list"}, &cons); err != nil || len(cons.Consents) != 1 {
		t.Fatalf("consent list after allow: %v %+v, want it kept", err, cons)
	}
}
