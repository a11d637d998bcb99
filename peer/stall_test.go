package peer

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// TestStalledAppStallsNoOther: one app stops reading its hub (its writer
// blocks in write(2) behind a full socket) and its store access blocks
// (session.open and history wait at the
// store); every other app's requests and tool calls, host-confirmed ones
// included, still complete, and status, approvals and the stalled app's
// own tool calls still answer. Released, the stalled app gets what it was
// owed, in order.
func TestStalledAppStallsNoOther(t *testing.T) {
	var stalled atomic.Bool
	gate := make(chan struct{})
	atStore := make(chan struct{}, 16)
	h, relay := newToolHarness(t, func(c *Config) {
		c.WriteTimeout = time.Minute
		c.Store = newGatedStore(c.Store.(*policy.Store), func(app string) error {
			if app == "stuck" && stalled.Load() {
				atStore <- struct{}{}
				<-gate
			}
			return nil
		})
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	defer release()
	stuck, sctx := h.toolApp(toolEntry("stuck"))
	free, fctx := h.toolApp(toolEntry("free"))

	// The stuck app stops reading: pass-through frames fill its socket
	// and its write queue's push share.
	pass := json.RawMessage(`{"ui":"` + strings.Repeat("s", 4000) + `"}`)
	for sent := 0; ; sent++ {
		if err := h.m.Send("stuck", pass, nil); errors.Is(err, ErrQueueFull) {
			break
		} else if err != nil {
			t.Fatalf("send %d: %v", sent, err)
		}
		if sent > 100000 {
			t.Fatal("the stuck app's queue never filled")
		}
	}
	stalled.Store(true)
	// Its store stalls: a session.open waits; a host call does not (its
	// standing rules are in memory), and raises its sheet at once.
	stuck.request(policy.MethodSessionOpen, nil)
	<-atStore
	accepted := make(chan error, 1)
	go func() { accepted <- h.m.ToolCall("stuck", kc(sctx, "s1", "notes.append", RiskWrite, ConfirmHost)) }()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("call into the stalled app: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("a tool call into the stalled app waited for its store")
	}
	if s := h.events.nextApproval(t); s.App != "stuck" || s.CallID != "s1" || s.State != ApprovalPending {
		t.Fatalf("the stalled app's sheet: %+v", s)
	}

	// The other app is served, store and host confirmation included.
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx2 := free.open(nil)
		free.okReply(free.request(policy.MethodSessionHistory, map[string]any{"context_id": ctx2}))
		h.call("free", kc(fctx, "f1", "notes.search", RiskRead, ConfirmNone))
		free.nextToolCall("f1")
		free.ok("f1", `{"hits":[]}`)
		h.call("free", kc(fctx, "f2", "notes.append", RiskWrite, ConfirmHost))
		sheet := h.events.nextApproval(t)
		if sheet.App != "free" || sheet.CallID != "f2" {
			t.Errorf("sheet %+v", sheet)
			return
		}
		if err := h.m.Approve(sheet.ApprovalID, policy.Allow, false); err != nil {
			t.Errorf("approve: %v", err)
			return
		}
		free.nextToolCall("f2")
		free.ok("f2", "")
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("the other app was not served while one app's socket and store stalled")
	}
	if t.Failed() {
		return
	}
	h.events.nextApproval(t) // f2's sheet, settled
	if st := h.m.LinkStatus("stuck"); !st.Connected || st.OutstandingCalls != 1 {
		t.Fatalf("status of the stuck app: %+v", st)
	}
	if err := h.m.ToolCancel("stuck", "s1"); err != nil {
		t.Fatalf("cancel the stuck app's call: %v", err)
	}
	byCall := map[string][]string{}
	for _, e := range relay.WaitFor(6, wait) {
		byCall[e.CallID] = append(byCall[e.CallID], e.String())
	}
	for id, want := range map[string][]string{
		"s1": {"ack stuck s1", "fin stuck s1 error cancelled"},
		"f1": {"ack free f1", `fin free f1 ok {"hits":[]}`},
		"f2": {"ack free f2", "fin free f2 ok"},
	} {
		if !slices.Equal(byCall[id], want) {
			t.Errorf("relay saw for %s\n  %s\nwant\n  %s", id, strings.Join(byCall[id], "\n  "), strings.Join(want, "\n  "))
		}
	}

	// Released: the stuck app gets its frames, then its context.
	release()
	for {
		d, err := decodeDown(stuck.nextLine())
		if r, ok := d.(*frame.Reply); err == nil && ok {
			if !r.OK {
				t.Fatalf("session.open after the stall: %v", r.Error)
			}
			break
		}
	}
	stuck.expectFrames()
}
