package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// toolRig is a control server with the tool ops over a real peer.Manager,
// and one app on a real hub socketpair whose end the test holds.
type toolRig struct {
	t       testing.TB
	ts      *testServer
	m       *peer.Manager
	store   *policy.Store
	approve chan peer.Approval
	hub     net.Conn
	r       *bufio.Reader // the app's end of hub, buffered
	ctx     string        // the app's context (account personal)
	pl      *peerLink     // the kernels attached, by connection
}

type toolRigEvents struct{ approvals chan peer.Approval }

func (e toolRigEvents) Approval(a peer.Approval)         { e.approvals <- a }
func (e toolRigEvents) AppFrame(string, json.RawMessage) {}

// opTestAttach is kernel.attach (the real one) under another name, so the
// rig shows it is the rig's.
const opTestAttach = "test.kernel.attach"

func newToolRig(t testing.TB) *toolRig { return newToolRigWith(t, nil) }

// newToolRigWith is newToolRig with the Manager's Config changed by tweak.
func newToolRigWith(t testing.TB, tweak func(*peer.Config)) *toolRig {
	t.Helper()
	return newToolRigIn(t, t.TempDir(), tweak, nil)
}

// newToolRigIn is newToolRigWith with the state file in dir and the
// control socket's listener wrapped by wrap (nil: as it is).
func newToolRigIn(t testing.TB, dir string, tweak func(*peer.Config), wrap func(net.Listener) net.Listener) *toolRig {
	t.Helper()
	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: filepath.Join(dir, policy.StoreFile)})
	if err != nil {
		t.Fatal(err)
	}
	rig := &toolRig{t: t, store: store, approve: make(chan peer.Approval, 100)}
	cfg := peer.Config{Store: store, Events: toolRigEvents{rig.approve}, Log: testLogger(t), Nonce: "n"}
	if tweak != nil {
		tweak(&cfg)
	}
	rig.m = peer.New(cfg)
	// The real kernel.attach (no event before its answer, detach when
	// the connection ends), under the rig's own op name.
	pl := &peerLink{store: store, m: rig.m, log: testLogger(t)}
	rig.pl = pl
	rig.ts = startServerOn(t, newFakeApps("notes"), func(c *ServerConfig) {
		c.Store = func() *control.StoreStatus { return wireStoreStatus(store.Health()) }
	}, wrap, func(s *Server) {
		s.handleOrdered(opTestAttach, withArgs(pl.opKernelAttach))
		pl.registerToolOps(s)
	})
	t.Cleanup(func() { rig.m.Close(); store.Close() })

	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	appFile := os.NewFile(uintptr(fds[1]), "app")
	rig.hub, err = net.FileConn(appFile)
	appFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rig.hub.Close() })
	rig.r = bufio.NewReader(rig.hub)
	app := policy.App{ID: "notes", Exec: []string{"/bin/true"},
		Grants:  policy.Grants{Services: []string{policy.ServiceAgent}, Methods: policy.KnownMethods(), Tools: []string{"notes.search", "notes.append"}},
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Accounts: []string{"personal"}}}
	rig.m.Attach(app, os.NewFile(uintptr(fds[0]), "daemon"))
	rig.appWrite(&hubRequest{ReqID: "o", Method: policy.MethodSessionOpen})
	select {
	case a := <-rig.approve:
		if err := rig.m.Approve(a.ApprovalID, policy.Allow, false); err != nil {
			t.Fatal(err)
		}
		<-rig.approve // settled
	case <-time.After(10 * time.Second):
		t.Fatal("no consent approval")
	}
	var data struct {
		ContextID string `json:"context_id"`
	}
	if rp := rig.appNext(); rp.Type != "reply" || !rp.OK || json.Unmarshal(rp.Data, &data) != nil {
		t.Fatalf("session.open: the app got %+v", rp)
	}
	rig.ctx = data.ContextID
	return rig
}

// kernel dials the socket and attaches as the kernel.
func (r *toolRig) kernel() *rawConn {
	r.t.Helper()
	k := dialRaw(r.t, r.ts.path)
	k.send(`{"id":1,"op":"` + opTestAttach + `"}`)
	if resp := k.response(); !resp.OK {
		r.t.Fatalf("attach: %+v", resp.Error)
	}
	return k
}

func (c *rawConn) expectLine(want string) {
	c.t.Helper()
	if got := string(c.line()); got != want+"\n" {
		c.t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestToolOpsRoundTrip(t *testing.T) {
	rig := newToolRig(t)
	k := rig.kernel()
	k.send(fmt.Sprintf(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"c1","name":"notes.search","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"assistant"}}}`, rig.ctx))
	// The answer first, then the call's events.
	k.expectLine(`{"id":2,"ok":true,"data":{"call_id":"c1","accepted":true}}`)
	k.expectLine(`{"event":"tool.acknowledged","app":"notes","call_id":"c1"}`)
	tc := rig.appNext()
	if tc.Type != "tool_call" || tc.CallID != "c1" || tc.Account != "personal" || tc.ContextID != rig.ctx || tc.Client != "notes" || tc.Caller != "assistant" {
		t.Fatalf("app got %+v", tc)
	}
	rig.appWrite(&hubToolResult{CallID: "c1", OK: true, Data: json.RawMessage(`{"matches":[]}`)})
	k.expectLine(`{"event":"tool.finished","app":"notes","call_id":"c1","outcome":"ok","data":{"matches":[]}}`)

	// tool.cancel of a delivered write: the app is told, the kernel gets
	// outcome_unknown.
	k.send(fmt.Sprintf(`{"id":3,"op":"tool.call","args":{"app":"notes","call":{"call_id":"c2","name":"notes.append","args":{},"risk":"write","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"assistant"}}}`, rig.ctx))
	k.expectLine(`{"id":3,"ok":true,"data":{"call_id":"c2","accepted":true}}`)
	k.expectLine(`{"event":"tool.acknowledged","app":"notes","call_id":"c2"}`)
	rig.appNext()
	k.send(`{"id":4,"op":"tool.cancel","args":{"app":"notes","call_id":"c2"}}`)
	k.expectLine(`{"event":"tool.finished","app":"notes","call_id":"c2","outcome":"outcome_unknown","error":{"code":"cancelled","message":"the caller cancelled the call"}}`)
	k.expectLine(`{"id":4,"ok":true,"data":{}}`)
	if c := rig.appNext(); c.Type != "tool_cancel" || c.CallID != "c2" || c.Reason != "cancelled" {
		t.Fatalf("app got %#v", c)
	}

	// The audit op reads both calls back.
	var audit control.AuditData
	if err := rig.ts.client.Do(t.Context(), control.OpAudit, control.AuditArgs{App: "notes"}, &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Entries) != 2 || audit.Entries[0].Outcome != "ok" || audit.Entries[1].Outcome != "outcome_unknown" || audit.Entries[1].End != "cancelled" {
		t.Fatalf("audit %+v", audit.Entries)
	}
}

func TestToolOpsRefusals(t *testing.T) {
	rig := newToolRig(t)
	k := rig.kernel()
	k.send(fmt.Sprintf(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"dup","name":"notes.search","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"assistant"}}}`, rig.ctx))
	if resp := k.response(); !resp.OK {
		t.Fatalf("%+v", resp.Error)
	}
	k.expectLine(`{"event":"tool.acknowledged","app":"notes","call_id":"dup"}`)
	call := func(app, id, name, ctx string, timeout int) string {
		return fmt.Sprintf(`{"app":%q,"call":{"call_id":%q,"name":%q,"confirm":"none","timeout_ms":%d,"context_id":%q,"caller":"assistant"}}`, app, id, name, timeout, ctx)
	}
	tests := []struct {
		name, op, args, code string
		kernel               bool
	}{
		{"not attached", control.OpToolCall, call("notes", "x", "notes.search", rig.ctx, 5000), control.CodeNotAttached, false},
		{"not connected", control.OpToolCall, call("ghost", "x", "notes.search", rig.ctx, 5000), "not_connected", true},
		{"duplicate", control.OpToolCall, call("notes", "dup", "notes.search", rig.ctx, 5000), "duplicate", true},
		{"unknown context", control.OpToolCall, call("notes", "x", "notes.search", "n-99", 5000), "unknown_context", true},
		{"declined", control.OpToolCall, call("notes", "x", "mail.send", rig.ctx, 5000), "declined", true},
		{"timeout 0", control.OpToolCall, call("notes", "x", "notes.search", rig.ctx, 0), control.CodeBadRequest, true},
		{"unknown member", control.OpToolCall, `{"app":"notes","call":{"call_id":"x","account":"bank"}}`, control.CodeBadRequest, true},
		{"no app", control.OpToolCall, `{"call":{}}`, control.CodeBadRequest, true},
		{"no confirm", control.OpToolCall, `{"app":"notes","call":{"call_id":"x","name":"notes.search","timeout_ms":5000,"context_id":"` + rig.ctx + `","caller":"k"}}`, control.CodeBadRequest, true},
		{"no caller", control.OpToolCall, `{"app":"notes","call":{"call_id":"x","name":"notes.search","confirm":"host","timeout_ms":5000,"context_id":"` + rig.ctx + `"}}`, control.CodeBadRequest, true},
		{"cancel unknown", control.OpToolCancel, `{"app":"notes","call_id":"nope"}`, "unknown_call", true},
		{"cancel not attached", control.OpToolCancel, `{"app":"notes","call_id":"dup"}`, control.CodeNotAttached, false},
		{"owner of another's", control.OpContextOwner, `{"app":"ghost","context_id":"` + rig.ctx + `"}`, "unknown_context", false},
		{"account.close no account", control.OpAccountClose, `{"app":"notes"}`, control.CodeBadRequest, false},
		{"rules bad action", control.OpRules, `{"action":"purge"}`, control.CodeBadRequest, false},
		{"rules revoke no app", control.OpRules, `{"action":"revoke"}`, control.CodeBadRequest, false},
		{"audit negative", control.OpAudit, `{"limit":-1}`, control.CodeBadRequest, false},
	}
	other := dialRaw(t, rig.ts.path)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := other
			if tt.kernel {
				c = k
			}
			c.t = t
			c.send(fmt.Sprintf(`{"id":%d,"op":%q,"args":%s}`, 10+i, tt.op, tt.args))
			resp := c.response()
			if resp.OK || resp.Error.Code != tt.code {
				t.Fatalf("got %+v %+v, want %s", resp.OK, resp.Error, tt.code)
			}
			var args struct {
				App string `json:"app"`
			}
			json.Unmarshal([]byte(tt.args), &args)
			checkStyle(t, tt.op, args.App, resp.Error)
		})
	}
}

// TestToolOpsCallsCap: a tool.call past the app's MaxCalls outstanding is
// answered quota_exceeded, and nothing of it reaches the app or the
// kernel's events; an outcome makes room.
func TestToolOpsCallsCap(t *testing.T) {
	rig := newToolRigWith(t, func(c *peer.Config) { c.MaxCalls = 1 })
	k := rig.kernel()
	call := func(id int, callID string) string {
		return fmt.Sprintf(`{"id":%d,"op":"tool.call","args":{"app":"notes","call":{"call_id":%q,"name":"notes.search","risk":"read","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"assistant"}}}`, id, callID, rig.ctx)
	}
	k.send(call(2, "c1"))
	k.expectLine(`{"id":2,"ok":true,"data":{"call_id":"c1","accepted":true}}`)
	k.expectLine(`{"event":"tool.acknowledged","app":"notes","call_id":"c1"}`)
	rig.appNext()
	k.send(call(3, "c2"))
	resp := k.response()
	if resp.OK || resp.Error.Code != peer.CodeQuotaExceeded {
		t.Fatalf("a call past the cap: %+v %+v", resp.OK, resp.Error)
	}
	checkStyle(t, control.OpToolCall, "notes", resp.Error)
	rig.appWrite(&hubToolResult{CallID: "c1", OK: true})
	k.expectLine(`{"event":"tool.finished","app":"notes","call_id":"c1","outcome":"ok"}`)
	k.send(call(4, "c2"))
	k.expectLine(`{"id":4,"ok":true,"data":{"call_id":"c2","accepted":true}}`)
}

func TestToolOpsContextsAndRules(t *testing.T) {
	rig := newToolRig(t)
	c := rig.ts.client
	ctx := t.Context()
	var owner control.ContextOwner
	if err := c.Do(ctx, control.OpContextOwner, control.ContextArgs{App: "notes", ContextID: rig.ctx}, &owner); err != nil || owner != (control.ContextOwner{Account: "personal", Client: "notes"}) {
		t.Fatalf("owner %+v %v", owner, err)
	}
	var list control.ContextsData
	if err := c.Do(ctx, control.OpContextList, control.AppArgs{App: "notes"}, &list); err != nil || len(list.Contexts) != 1 ||
		list.Contexts[0] != (control.ContextInfo{ContextID: rig.ctx, Account: "personal", Client: "notes"}) {
		t.Fatalf("context.list %+v %v", list, err)
	}
	for app, want := range map[string]bool{"notes": true, "ghost": false} {
		var l control.LinkData
		if err := c.Do(ctx, control.OpLinkHas, control.AppArgs{App: app}, &l); err != nil || l.Connected != want {
			t.Fatalf("link.has %s: %+v %v", app, l, err)
		}
	}
	var closed control.AccountData
	if err := c.Do(ctx, control.OpAccountClose, control.AccountArgs{App: "notes", Account: "personal"}, &closed); err != nil || closed.Closed != 1 {
		t.Fatalf("account.close %+v %v", closed, err)
	}
	if cc := rig.appNext(); cc.Type != "context_closed" || cc.ContextID != rig.ctx || cc.Reason != "account_closed" {
		t.Fatalf("app got %#v", cc)
	}

	if err := rig.store.SetRule(policy.Rule{App: "notes", Tool: "notes.append", Decision: policy.Allow}); err != nil {
		t.Fatal(err)
	}
	var rules control.RulesData
	if err := c.Do(ctx, control.OpRules, control.RulesArgs{Action: "list"}, &rules); err != nil || len(rules.Rules) != 1 || rules.Rules[0].Tool != "notes.append" {
		t.Fatalf("rules %+v %v", rules, err)
	}
	if err := c.Do(ctx, control.OpRules, control.RulesArgs{Action: "revoke", App: "notes", Tool: "notes.append"}, &rules); err != nil || len(rules.Rules) != 1 {
		t.Fatalf("revoke %+v %v", rules, err)
	}
	if err := c.Do(ctx, control.OpRules, control.RulesArgs{}, &rules); err != nil || len(rules.Rules) != 0 {
		t.Fatalf("rules after revoke %+v %v", rules, err)
	}
}

// TestQueuedOutcomesFollowTheAttachAnswer: outcomes queued while no
// kernel was attached reach the next kernel after its kernel.attach
// answer, never before it.
func TestQueuedOutcomesFollowTheAttachAnswer(t *testing.T) {
	rig := newToolRig(t)
	k := rig.kernel()
	k.send(fmt.Sprintf(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"c1","name":"notes.search","args":{},"risk":"read","confirm":"none","timeout_ms":300,"context_id":%q,"caller":"assistant"}}}`, rig.ctx))
	k.expectLine(`{"id":2,"ok":true,"data":{"call_id":"c1","accepted":true}}`)
	k.expectLine(`{"event":"tool.acknowledged","app":"notes","call_id":"c1"}`)
	rig.appNext() // the call
	k.nc.Close()  // the kernel goes; the call times out with none attached
	if tc := rig.appNext(); tc.Type != "tool_cancel" || tc.CallID != "c1" {
		t.Fatalf("app got %+v, want the call's tool_cancel", tc)
	}
	for {
		k2 := dialRaw(t, rig.ts.path)
		k2.send(`{"id":1,"op":"` + opTestAttach + `"}`)
		line := string(k2.line())
		if strings.Contains(line, "kernel_attached") { // the first is still being torn down
			k2.nc.Close()
			continue
		}
		if line != `{"id":1,"ok":true,"data":{"attached":true}}`+"\n" {
			t.Fatalf("first line after attach: %s", line)
		}
		if line := string(k2.line()); !strings.HasPrefix(line, `{"event":"tool.finished","app":"notes","call_id":"c1","outcome":"error","error":{"code":"timeout"`) {
			t.Fatalf("second line: %s", line)
		}
		return
	}
}
