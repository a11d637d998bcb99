package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// sessionsEnv sets how many sessions TestSessionsForever opens (the
// default keeps make test quick; OCTOSUP_TEST_SESSIONS=100000 is the
// figure of docs/protocol.md).
const sessionsEnv = "OCTOSUP_TEST_SESSIONS"

// openCloseUntitled has the app open n untitled sessions and close each
// one's context, window requests at a time in one write each way (the
// way a busy app pipelines), and returns the last context, left open.
func openCloseUntitled(t testing.TB, a *testApp, n, window int) string {
	t.Helper()
	var last string
	var buf bytes.Buffer
	for done := 0; done < n; {
		w := min(window, n-done)
		buf.Reset()
		for i := range w {
			line, _ := encodeUp(&frame.Request{ReqID: "o" + strconv.Itoa(i), Method: policy.MethodSessionOpen})
			buf.Write(line)
		}
		a.write(buf.String())
		ctxs := make([]string, w)
		for range w {
			r, ok := a.next().(*frame.Reply)
			if !ok || !r.OK {
				t.Fatalf("session.open %d of %d: %+v", done, n, r)
			}
			var d struct {
				ContextID string `json:"context_id"`
			}
			json.Unmarshal(r.Data, &d)
			i, _ := strconv.Atoi(strings.TrimPrefix(r.ReqID, "o"))
			ctxs[i] = d.ContextID
		}
		done += w
		if done == n {
			last, ctxs = ctxs[w-1], ctxs[:w-1]
		}
		buf.Reset()
		for i, c := range ctxs {
			line, _ := encodeUp(&frame.Request{ReqID: "c" + strconv.Itoa(i), Method: policy.MethodContextClose,
				Args: json.RawMessage(`{"context_id":"` + c + `"}`)})
			buf.Write(line)
		}
		a.write(buf.String())
		for range 2 * len(ctxs) { // context_closed, then the reply, each
			switch f := a.next().(type) {
			case *frame.ContextClosed:
			case *frame.Reply:
				if !f.OK {
					t.Fatalf("context.close: %+v", f.Error)
				}
			default:
				t.Fatalf("unexpected %#v", f)
			}
		}
	}
	return last
}

// sessionCostBound is the most one session (with a title of at most 256
// bytes, the protocol's cap) counts against MaxStoreBytes: its record
// (~120 bytes of JSON plus the title), its index entries and its turns'
// bucket.
const sessionCostBound = 1024

// stateFileBound is the bound docs/protocol.md states for the state
// file of a daemon whose apps hold at most held bytes of records: bbolt
// keeps its pages at least a quarter full (it merges the emptier ones),
// grows its file by doubling, and adds its meta pages, freelist and the
// roots of its buckets (under 256 KiB).
func stateFileBound(held int64) int64 { return 2*4*held + 256<<10 }

// TestSessionsForever: an app that opens untitled sessions forever (and
// closes them) keeps being served, while what the daemon stores for it
// stays at its cap: the oldest closed untitled sessions go, its titled
// session and the sessions of its open contexts stay, with their turns;
// the state file stays within the bound computed from the caps, and
// another app is served throughout.
func TestSessionsForever(t *testing.T) {
	n := 3000
	if v := os.Getenv(sessionsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: %v", sessionsEnv, v, err)
		}
	} else if testing.Short() {
		n = 600
	}
	const maxSessions = 50
	h := newHarness(t, func(c *Config) { c.MaxSessions = maxSessions })
	k, ks := h.kernel()
	// The kernel hears of every close: more than its channel holds.
	stop, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-k.closed:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-drained }()
	a := h.attach(notesApp("notes"))
	other := h.attach(notesApp("mail"))
	h.grant(a) // its context stays open
	h.grant(other)
	titled := a.open(map[string]any{"title": "groceries"})
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, titled, "G1", "milk"))
	held := a.open(nil) // open throughout: never evicted
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, held, "H1", "eggs"))

	start := time.Now()
	last := openCloseUntitled(t, a, n, 32)
	elapsed := time.Since(start)

	// At the cap, and no more: the store's count, not a guess.
	u, err := h.store.Usage("notes")
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Sessions["personal"]; got != maxSessions {
		t.Fatalf("notes holds %d sessions for personal after %d opens, want its cap %d", got, n+4, maxSessions)
	}
	fi, err := os.Stat(h.path)
	if err != nil {
		t.Fatal(err)
	}
	heldBound := int64(maxSessions)*sessionCostBound + 8<<10 // and the two small turns
	if bound := stateFileBound(heldBound); fi.Size() > bound {
		t.Fatalf("state file of %d bytes after %d sessions, over the bound of %d the caps give", fi.Size(), n, bound)
	}
	t.Logf("%d sessions opened and closed in %v: state file %d bytes, notes holds %d bytes in %d sessions",
		n, elapsed.Round(time.Millisecond), fi.Size(), u.Bytes, u.Sessions["personal"])

	// The latest session works, and so do the titled and the held ones,
	// history and all.
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, last, "L1", "now"))
	for ctx, want := range map[string]string{last: "L1", titled: "G1", held: "H1"} {
		if turns, _ := history(t, a, ctx); len(turns) != 1 || turns[0].TurnID != want {
			t.Fatalf("history of %s: %+v, want %s", ctx, turns, want)
		}
	}
	reopened := a.open(map[string]any{"title": "groceries"})
	if turns, _ := history(t, a, reopened); len(turns) != 1 || turns[0].TurnID != "G1" {
		t.Fatalf("the titled session lost its history: %+v", turns)
	}
	// Status-like queries are answered, and the other app is served.
	if st := h.m.LinkStatus("notes"); !st.Connected || st.Contexts != 5 {
		t.Fatalf("status %+v", st)
	}
	other.open(nil)
	if u, _ := h.store.Usage("mail"); u.Sessions["personal"] != 2 {
		t.Fatalf("mail holds %+v", u)
	}
}

// TestSessionsCapNothingEvictable: when every session of the account is
// titled or has an open context, a new session is refused
// quota_exceeded, saying which cap and what to do, and nothing else
// changes: reopening a title still works, other accounts and other apps
// are served, and once a context closes, its session makes room.
func TestSessionsCapNothingEvictable(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxSessions = 3 })
	a := h.attach(notesApp("notes"))
	other := h.attach(notesApp("mail"))
	h.grant(a) // one
	h.grant(other)
	titled := a.open(map[string]any{"title": "groceries"})
	open := a.open(nil)
	e := a.failReply(a.request(policy.MethodSessionOpen, nil), CodeQuotaExceeded)
	if !strings.Contains(e.Message, "3 sessions") || !strings.Contains(e.Message, "close a context") {
		t.Fatalf("message %q does not say which cap and what to do", e.Message)
	}
	a.failReply(a.request(policy.MethodSessionOpen, map[string]any{"title": "new"}), CodeQuotaExceeded)
	if again := a.open(map[string]any{"title": "groceries"}); again == titled {
		t.Fatal("context id reused")
	}
	a.open(map[string]any{"account": "work"}) // counts apart
	other.open(nil)
	closeID := a.request(policy.MethodContextClose, map[string]any{"context_id": open})
	a.next() // context_closed
	a.okReply(closeID)
	a.open(nil) // evicts the closed one
	if u, _ := h.store.Usage("notes"); u.Sessions["personal"] != 3 || u.Sessions["work"] != 1 {
		t.Fatalf("notes holds %+v", u)
	}
}

// TestTurnsCapDropsOldest: a session keeps its newest MaxTurns turns.
func TestTurnsCapDropsOldest(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxTurns = 5 })
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(map[string]any{"title": "long"})
	for i := range 8 {
		endTurnOK(t, a, ks, startTurn(t, a, k, ks, ctx, fmt.Sprint("T", i), i))
	}
	turns, truncated := history(t, a, ctx)
	var ids []string
	for _, tn := range turns {
		ids = append(ids, tn.TurnID)
	}
	if got := strings.Join(ids, " "); got != "T3 T4 T5 T6 T7" || truncated {
		t.Fatalf("history %s (truncated %v), want the newest 5", got, truncated)
	}
}

// TestHistoryReadsOnlyWhatFits: a session holding 64 times a frame's
// worth of turns answers history with the newest that fit, and the
// daemon allocates a small multiple of a frame for it, not the session:
// it reads newest first and stops at the budget.
func TestHistoryReadsOnlyWhatFits(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(map[string]any{"title": "huge"})
	var session uint64
	h.m.inspect("notes", func(p *peer) { session = p.contexts[ctx].session.ID })
	const turns = 64
	input := json.RawMessage(`"` + strings.Repeat("a", frame.MaxFrame-4096) + `"`)
	for i := range turns {
		tn := policy.Turn{TurnID: fmt.Sprint("T", i), Input: input, Events: []json.RawMessage{}, End: "completed"}
		if err := h.store.AppendTurn(session, tn, policy.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stored := int64(turns) * int64(len(input))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got, truncated := history(t, a, ctx)
	runtime.ReadMemStats(&after)
	if len(got) != 1 || got[0].TurnID != fmt.Sprint("T", turns-1) || !truncated {
		t.Fatalf("history of %d turns, truncated %v: want the newest alone, truncated", len(got), truncated)
	}
	// What the app's end decodes (the reply, its turns) is in it too:
	// a few frames' worth. Reading the session would be 64.
	if alloc := int64(after.TotalAlloc - before.TotalAlloc); alloc > stored/4 {
		t.Fatalf("history allocated %d bytes for a session of %d: it read more than it kept", alloc, stored)
	}
}

// TestPendingApprovalsCap: an app with MaxPendingApprovals host sheets
// open gets no more: the next host-confirmed call (no standing rule)
// ends Error{quota_exceeded} without a sheet, another app's calls still
// get theirs, and answering a sheet makes room.
func TestPendingApprovalsCap(t *testing.T) {
	h, relay := newToolHarness(t, func(c *Config) { c.MaxPendingApprovals = 2 })
	a, ctx := h.toolApp(toolEntry("notes"))
	_, bctx := h.toolApp(toolEntry("mail"))
	for _, id := range []string{"c1", "c2"} {
		h.call("notes", kc(ctx, id, "notes.append", RiskWrite, ConfirmHost))
		if ap := h.events.nextApproval(t); ap.CallID != id || ap.State != ApprovalPending {
			t.Fatalf("approval %+v", ap)
		}
	}
	h.call("notes", kc(ctx, "c3", "notes.append", RiskWrite, ConfirmHost))
	expectRelay(t, relay, "ack notes c1", "ack notes c2", "ack notes c3", "fin notes c3 error quota_exceeded")
	h.events.noApproval(t)
	h.call("mail", kc(bctx, "m1", "notes.append", RiskWrite, ConfirmHost))
	m1 := h.events.nextApproval(t)
	if m1.App != "mail" || m1.CallID != "m1" {
		t.Fatalf("another app's sheet: %+v", m1)
	}
	var c1 Approval
	for _, ap := range h.m.Approvals() {
		if ap.CallID == "c1" {
			c1 = ap
		}
	}
	if err := h.m.Approve(c1.ApprovalID, policy.Deny, false); err != nil {
		t.Fatal(err)
	}
	h.events.nextApproval(t) // c1 denied
	h.call("notes", kc(ctx, "c4", "notes.append", RiskWrite, ConfirmHost))
	if ap := h.events.nextApproval(t); ap.CallID != "c4" {
		t.Fatalf("after a sheet was answered: %+v", ap)
	}
	a.expectFrames()
}

// TestCallsInFlightCap: an app with MaxCalls outstanding is refused the
// next call (ErrLimit, quota_exceeded on the control socket) before it
// reaches the app or the relay; another app is served; an outcome makes
// room.
func TestCallsInFlightCap(t *testing.T) {
	h, relay := newToolHarness(t, func(c *Config) { c.MaxCalls = 2 })
	a, ctx := h.toolApp(toolEntry("notes"))
	b, bctx := h.toolApp(toolEntry("mail"))
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	h.call("notes", kc(ctx, "c2", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c1")
	a.nextToolCall("c2")
	err := h.m.ToolCall("notes", kc(ctx, "c3", "notes.search", RiskRead, ConfirmNone))
	if !errors.Is(err, ErrLimit) || Code(err) != CodeQuotaExceeded || !strings.Contains(err.Error(), "2 tool calls outstanding") {
		t.Fatalf("third call: %v (%s)", err, Code(err))
	}
	h.call("mail", kc(bctx, "m1", "notes.search", RiskRead, ConfirmNone))
	b.nextToolCall("m1")
	b.ok("m1", `{"n":1}`)
	expectRelay(t, relay, "ack notes c1", "ack notes c2", "ack mail m1", "fin mail m1 ok {\"n\":1}")
	a.ok("c1", `{"n":1}`)
	expectRelay(t, relay, "ack notes c1", "ack notes c2", "ack mail m1", "fin mail m1 ok {\"n\":1}", "fin notes c1 ok {\"n\":1}")
	h.call("notes", kc(ctx, "c3", "notes.search", RiskRead, ConfirmNone)) // c3 was refused, so it is not a duplicate
	a.nextToolCall("c3")
}

// TestQueueFullRefusesPushes: an app that stops reading gets frames
// pushed from outside the link (app.send, a kernel's events and tool
// calls) only until its queue's push share is full: the next is refused
// ErrQueueFull (a call ends Error{queue_full}, a turn ends queue_full),
// the app stays connected, another app is served, and once the app reads
// again, it gets what was queued, in order, and pushes go through.
func TestQueueFullRefusesPushes(t *testing.T) {
	h, relay := newToolHarness(t, func(c *Config) { c.QueueFrames = 16 })
	k, ks := h.kernel() // a fakeKernel is no relay: relay stays
	a, ctx := h.toolApp(toolEntry("notes"))
	other, octx := h.toolApp(toolEntry("mail"))
	turn := startTurn(t, a, k, ks, ctx, "T1", "x")
	// A frame larger than the hub's socket buffer holds (~208 KiB): the
	// writer's first batch never ends while the app does not read, so a
	// queue that refused a push stays full. With 1000-byte frames the
	// writer could drain what it held into the socket after the refusal,
	// and the event below was taken (the test's old race).
	frame := json.RawMessage(`{"ui":"` + strings.Repeat("p", 300<<10) + `"}`)
	sent := 0
	for {
		err := h.m.Send("notes", frame, nil)
		if err != nil {
			if !errors.Is(err, ErrQueueFull) || Code(err) != CodeQueueFull {
				t.Fatalf("push %d: %v, want ErrQueueFull", sent, err)
			}
			break
		}
		if sent++; sent > 10000 {
			t.Fatal("the queue never filled")
		}
	}
	if !h.m.HasLink("notes") {
		t.Fatal("the app was disconnected for a full push share")
	}
	err := ks.Event(KernelEvent{App: "notes", ReqID: turn, Event: json.RawMessage(`{"type":"text"}`)})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("event into a full queue: %v", err)
	}
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	expectRelay(t, relay, "ack notes c1", "fin notes c1 error queue_full")
	// Another app is served meanwhile.
	other.open(nil)
	h.call("mail", kc(octx, "m1", "notes.search", RiskRead, ConfirmNone))
	other.nextToolCall("m1")
	// The app reads: every pushed frame, then the turn's end.
	for i := range sent {
		if got := a.nextLine(); !bytes.Equal(got, frame) {
			t.Fatalf("frame %d: %.60s", i, got)
		}
	}
	if typ, reason := eventType(a.event(turn)); typ != TurnEnd || reason != "queue_full" {
		t.Fatalf("turn ended %s %s, want turn.end queue_full", typ, reason)
	}
	if err := h.m.Send("notes", frame, nil); err != nil {
		t.Fatalf("push after the app read: %v", err)
	}
	if got := a.nextLine(); !bytes.Equal(got, frame) {
		t.Fatalf("got %.60s", got)
	}
	a.expectFrames()
}
