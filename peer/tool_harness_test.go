package peer

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// Test helpers of the tool-call layer, on top of harness_test.go.

// toolEntry is notesApp with the demo's tools granted.
func toolEntry(id string) policy.App {
	app := notesApp(id)
	app.Grants.Tools = []string{"notes.search", "notes.append", "notes.wipe"}
	return app
}

// toolHarness is a harness with a recording relay installed.
func newToolHarness(t testing.TB, tweak func(*Config)) (*harness, *RecordingToolRelay) {
	t.Helper()
	h := newHarness(t, tweak)
	r := &RecordingToolRelay{}
	h.m.SetToolRelay(r)
	return h, r
}

// toolApp attaches app, gives it consent and opens one context (account
// personal). It returns the app and the context id.
func (h *harness) toolApp(app policy.App) (*testApp, string) {
	h.t.Helper()
	a := h.attach(app)
	h.grant(a)
	return a, a.open(nil)
}

// call hands a call over and fails the test on a refusal.
func (h *harness) call(app string, kc KernelToolCall) {
	h.t.Helper()
	if err := h.m.ToolCall(app, kc); err != nil {
		h.t.Fatalf("tool call %s: %v", kc.CallID, err)
	}
}

// framesUntilSync returns every line the daemon sent the app before the
// reply to a request sent now: the app's lines are handled in order, so
// this proves what was (and was not) written up to this point. It also
// orders the relay: every callback caused before it was recorded.
func (a *testApp) framesUntilSync() []string {
	a.t.Helper()
	id := a.request(policy.MethodSessionHistory, map[string]any{"context_id": "sync-0"})
	var out []string
	for {
		line := a.nextLine()
		if d, err := decodeDown(line); err == nil {
			if r, ok := d.(*frame.Reply); ok && r.ReqID == id {
				if r.OK || r.Error.Code != frame.CodeUnknownContext {
					a.t.Fatalf("sync reply %s", line)
				}
				return out
			}
		}
		out = append(out, string(line))
	}
}

// expectFrames checks the exact lines the app got since the last check.
func (a *testApp) expectFrames(want ...string) {
	a.t.Helper()
	got := a.framesUntilSync()
	if !slices.Equal(got, want) {
		a.t.Fatalf("app %s saw\n  %s\nwant\n  %s", a.id, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// expectRelay checks the exact callbacks the relay has seen.
func expectRelay(t testing.TB, r *RecordingToolRelay, want ...string) {
	t.Helper()
	var got []string
	for _, e := range r.WaitFor(len(want), wait) {
		got = append(got, e.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("relay saw\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func line(f frame.Down) string {
	b, err := frame.EncodeDown(f)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// toolCallLine is the tool_call frame the app must get for kc in context
// ctx of app (account personal).
func toolCallLine(app, ctx string, kc KernelToolCall, risk string) string {
	args := kc.Args
	if args == nil {
		args = json.RawMessage("{}")
	}
	return line(&frame.ToolCall{CallID: kc.CallID, Name: kc.Name, Args: args, Risk: risk,
		ConfirmRequired: kc.Confirm == ConfirmApp, TimeoutMS: kc.TimeoutMS,
		Account: "personal", ContextID: ctx, Client: app, Caller: kc.Caller})
}

func cancelLine(id, reason string) string {
	return line(&frame.ToolCancel{CallID: id, Reason: reason})
}

// result writes a tool_result.
func (a *testApp) result(r *frame.ToolResult) {
	a.t.Helper()
	b, err := encodeUp(r)
	if err != nil {
		a.t.Fatal(err)
	}
	a.write(string(b))
}

func (a *testApp) ok(id, data string) {
	a.t.Helper()
	var raw json.RawMessage
	if data != "" {
		raw = json.RawMessage(data)
	}
	a.result(&frame.ToolResult{CallID: id, OK: true, Data: raw})
}

func (a *testApp) awaiting(id string) {
	a.t.Helper()
	a.result(&frame.ToolResult{CallID: id, AwaitingConfirmation: true})
}

// nextToolCall reads the next frame, which must be the tool_call id.
func (a *testApp) nextToolCall(id string) *frame.ToolCall {
	a.t.Helper()
	d := a.next()
	c, ok := d.(*frame.ToolCall)
	if !ok || c.CallID != id {
		a.t.Fatalf("want tool_call %s, got %#v", id, d)
	}
	return c
}

// kc is a plain call with a generous deadline.
func kc(ctx, id, name, risk, confirm string) KernelToolCall {
	return KernelToolCall{CallID: id, ContextID: ctx, Name: name, Args: json.RawMessage(`{"q":"milk"}`), Risk: risk,
		Confirm: confirm, TimeoutMS: 60000, Caller: "assistant"}
}

// buffered is how many bytes wait in the app's socket, unread: peeked,
// not taken, without blocking (-1 when it cannot tell). It does not
// stop the test, so that it may run on the Manager's goroutines.
func (a *testApp) buffered() int {
	sc, err := a.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	var buf [1]byte
	sc.Control(func(fd uintptr) {
		m, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			n = m
		case err == unix.EAGAIN:
			n = 0
		}
	})
	return n
}
