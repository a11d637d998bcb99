package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// startTurn opens a turn at the kernel and has it answered ok with turnID.
func startTurn(t *testing.T, a *testApp, k *fakeKernel, ks *KernelSession, ctx, turnID string, input any) string {
	t.Helper()
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": input})
	k.nextRequest(t)
	if err := ks.Reply(KernelReply{App: a.id, ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"` + turnID + `"}`)}); err != nil {
		t.Fatal(err)
	}
	a.okReply(id)
	return id
}

func endTurnOK(t *testing.T, a *testApp, ks *KernelSession, id string) {
	t.Helper()
	end := `{"type":"turn.end","turn_id":"` + streamingTurn(ks, a.id, id) + `","reason":"completed"}`
	if err := ks.Event(KernelEvent{App: a.id, ReqID: id, Event: json.RawMessage(end)}); err != nil {
		t.Fatal(err)
	}
	a.event(id)
}

func history(t *testing.T, a *testApp, ctx string) (turns []policy.Turn, truncated bool) {
	t.Helper()
	id := a.request(policy.MethodSessionHistory, map[string]any{"context_id": ctx})
	r := a.reply(id)
	if !r.OK {
		t.Fatalf("history: %+v", r.Error)
	}
	var data struct {
		Turns     []policy.Turn `json:"turns"`
		Truncated bool          `json:"truncated"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		t.Fatal(err)
	}
	return data.Turns, data.Truncated
}

// TestTurnInputOwned: a request's args (what the kernel is handed, the
// turn's recorded input) are the app's, not a slice of the hub's read
// buffer that the app's next lines overwrite.
func TestTurnInputOwned(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	input := strings.Repeat("A", 24)
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": input})
	a.write(`{"ui":"` + strings.Repeat("B", 400) + `"}` + "\n") // the app keeps talking
	<-h.events.frames                                           // read after the request
	if r := k.nextRequest(t); !strings.Contains(string(r.Args), input) {
		t.Fatalf("the kernel was handed args %s, not what the app sent", r.Args)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); err != nil {
		t.Fatal(err)
	}
	a.okReply(id)
	endTurnOK(t, a, ks, id)
	turns, _ := history(t, a, ctx)
	if len(turns) != 1 || string(turns[0].Input) != `"`+input+`"` {
		t.Fatalf("recorded input %s, want what the app sent", turns[0].Input)
	}
}

// TestTurnKeepsBoundedEvents: a turn streams every event but keeps at
// most maxTurnBytes of them for its history, and says so.
func TestTurnKeepsBoundedEvents(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	id := startTurn(t, a, k, ks, ctx, "T1", "x")
	big := json.RawMessage(`{"type":"text","t":"` + strings.Repeat("a", 900<<10) + `"}`)
	for range 3 {
		if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: big}); err != nil {
			t.Fatal(err)
		}
		if ev := a.event(id); len(ev) != len(big) {
			t.Fatalf("streamed event of %d bytes, want %d", len(ev), len(big))
		}
	}
	endTurnOK(t, a, ks, id)
	turns, truncated := history(t, a, ctx)
	if truncated || len(turns) != 1 {
		t.Fatalf("history: %d turns, truncated %v", len(turns), truncated)
	}
	kept := 0
	for _, ev := range turns[0].Events {
		kept += len(ev)
	}
	if !turns[0].Truncated || kept > maxTurnBytes {
		t.Fatalf("turn kept %d bytes of events (truncated %v), cap %d", kept, turns[0].Truncated, maxTurnBytes)
	}
}

// TestHistoryFitsOneFrame: a history larger than a frame answers with the
// newest turns that fit, and truncated: true.
func TestHistoryFitsOneFrame(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	// Inputs of 400 KiB, escaped to twice that: three turns never fit.
	input := strings.Repeat(`"`, 200<<10)
	for i := range 3 {
		endTurnOK(t, a, ks, startTurn(t, a, k, ks, ctx, fmt.Sprint("T", i), input))
	}
	turns, truncated := history(t, a, ctx) // history reads the reply under the 1 MiB cap
	if !truncated || len(turns) == 0 || len(turns) == 3 || turns[len(turns)-1].TurnID != "T2" {
		ids := []string{}
		for _, tn := range turns {
			ids = append(ids, tn.TurnID)
		}
		t.Fatalf("history %v truncated %v: want the newest turns that fit, and truncated", ids, truncated)
	}
}

// TestOversizedKernelFrames: a kernel reply or event whose frame would
// pass the cap is refused; an event ends its turn (event_too_large), so
// the app is not left with a turn missing a piece.
func TestOversizedKernelFrames(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	// Fits MaxFrame as a value, not with the frame around it.
	huge := `"` + strings.Repeat("a", frame.MaxFrame-40) + `"`
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "x"})
	k.nextRequest(t)
	err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T1","x":` + huge + `}`)})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized reply: %v", err)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); err != nil {
		t.Fatalf("the request stayed open for a proper reply: %v", err)
	}
	a.okReply(id)
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(`{"type":"text","t":` + huge + `}`)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized event: %v", err)
	}
	if typ, reason := eventType(a.event(id)); typ != TurnEnd || reason != "event_too_large" {
		t.Fatalf("app got %s %s, want turn.end event_too_large", typ, reason)
	}
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(`{"type":"x"}`)}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("event after the turn ended: %v", err)
	}
}

// TestOpenRequestsStopTheReader: with MaxOpenRequests open, the daemon
// reads nothing more of the app's hub until one ends.
func TestOpenRequestsStopTheReader(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxOpenRequests = 2 })
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	var ids []string
	for range 3 {
		ids = append(ids, a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "x"}))
	}
	a.write(`{"ui":"after"}` + "\n")
	k.nextRequest(t)
	k.nextRequest(t)
	// No event says "not read": give the reader a moment to misbehave.
	select {
	case f := <-h.events.frames:
		t.Fatalf("the daemon read on past %d open requests: %s", 2, f.frame)
	case r := <-k.requests:
		t.Fatalf("a third request reached the kernel: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: ids[0], OK: false, Error: &Error{Code: frame.CodeInternal, Message: "no"}}); err != nil {
		t.Fatal(err)
	}
	a.failReply(ids[0], frame.CodeInternal)
	if r := k.nextRequest(t); r.ReqID != ids[2] {
		t.Fatalf("kernel got %s, want %s", r.ReqID, ids[2])
	}
	select {
	case <-h.events.frames:
	case <-time.After(wait):
		t.Fatal("the reader did not resume")
	}
}

// TestContextsCap: a link holds at most MaxContexts contexts.
func TestContextsCap(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxContexts = 2 })
	a := h.attach(notesApp("notes"))
	h.grant(a) // the first
	first := a.open(nil)
	e := a.failReply(a.request(policy.MethodSessionOpen, nil), CodeQuotaExceeded)
	if !strings.Contains(e.Message, "close one") {
		t.Fatalf("message %q does not say what to do", e.Message)
	}
	closeID := a.request(policy.MethodContextClose, map[string]any{"context_id": first})
	a.next() // context_closed, then the reply
	a.okReply(closeID)
	a.open(nil)
}

// TestDetachDoesNotWait: Detach returns while its peer is busy, so the
// link's teardown cannot have run (the supervisor calls it from its app
// goroutine, which must not wait on a peer); the teardown runs once the
// peer is free, and the app's next process, attached meanwhile, is
// served after it.
func TestDetachDoesNotWait(t *testing.T) {
	h := newHarness(t, nil)
	k, _ := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	release := h.holdPeer("notes")
	detached := make(chan struct{})
	go func() {
		h.m.Detach("notes")
		close(detached)
	}()
	select {
	case <-detached:
	case <-time.After(wait):
		release()
		t.Fatal("Detach waited for the peer")
	}
	select {
	case s := <-k.closed:
		release()
		t.Fatalf("teardown ran with the peer held: %s", s)
	default:
	}
	// The next process attaches while the old link's teardown waits: its
	// link reads nothing until that teardown is done (link.prev).
	next := make(chan *testApp, 1)
	go func() { next <- h.attach(notesApp("notes")) }()
	release()
	if got := k.nextClosed(t); !strings.HasSuffix(got, "app_exited") {
		t.Fatalf("kernel got %q", got)
	}
	(<-next).open(nil)
}

// TestApproveAfterShut: a consent prompt whose process is shut but not
// yet torn down is cancelled by its answer, and nothing is persisted.
// The answer's step runs with the peer held, between the shut and the
// teardown, which waits behind it.
func TestApproveAfterShut(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(t)
	p := h.m.peerOf("notes")
	p.mu.Lock()
	h.m.Detach("notes")
	_, err := p.beginDecide(ap.ApprovalID) // Approve's step
	p.mu.Unlock()
	if !errors.Is(err, ErrUnknownApproval) {
		t.Fatalf("approve after the process ended: %v", err)
	}
	if s := h.events.nextApproval(t); s.ApprovalID != ap.ApprovalID || s.State != ApprovalCancelled {
		t.Fatalf("%+v", s)
	}
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); !errors.Is(err, ErrUnknownApproval) {
		t.Fatalf("a second answer: %v", err)
	}
	if _, ok, _ := h.store.Consent("notes"); ok {
		t.Fatal("persisted a decision for a dead process")
	}
}

// TestLinkNeedsService: an app without agent.octos has its hub (frames
// pass through) but no peer link: status and HasLink say not connected.
func TestLinkNeedsService(t *testing.T) {
	h := newHarness(t, nil)
	app := notesApp("plain")
	app.Grants.Services = nil
	a := h.attach(app)
	a.write(`{"ui":1}` + "\n")
	<-h.events.frames
	if st := h.m.LinkStatus("plain"); st.Connected {
		t.Fatalf("status %+v: connected without agent.octos", st)
	}
	if h.m.HasLink("plain") {
		t.Fatal("HasLink without agent.octos")
	}
	a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeNotGranted)
}
