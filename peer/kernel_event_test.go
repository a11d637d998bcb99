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

// streamingTurn is the turn_id of app's streaming request reqID.
func streamingTurn(ks *KernelSession, app, reqID string) string {
	var id string
	ks.m.inspect(app, func(p *peer) { id = p.link.requests[reqID].turn.TurnID })
	return id
}

// TestKernelEventsMustFitTheirTurn: request.event forwards only a
// well-formed event of the turn it names; a refused one reaches neither
// the app nor the history, and the turn goes on.
func TestKernelEventsMustFitTheirTurn(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	id := startTurn(t, a, k, ks, ctx, "T1", "x")
	for _, tc := range []struct {
		name, event, want string
	}{
		{"a bare string", `"hello"`, `event must be a JSON object {"type": "...", ...}, not a string`},
		{"an array", `[1]`, `not an array`},
		{"no type", `{"text":"hi"}`, `event needs "type", a string of 1 to 128 bytes`},
		{"a type that is not a string", `{"type":3}`, `event needs "type"`},
		{"an empty type", `{"type":""}`, `event needs "type"`},
		{"another turn's id", `{"type":"text","turn_id":"T9"}`, `event's turn_id is "T9", but request ` + id + ` streams turn "T1"`},
		{"another context", `{"type":"text","context_id":"elsewhere"}`, `event's context_id is "elsewhere", but turn "T1" is of context ` + ctx},
		{"turn.end without turn_id", `{"type":"turn.end","reason":"completed"}`, `a turn.end event needs "turn_id": "T1" (the turn it ends) and a "reason"`},
		{"turn.end without reason", `{"type":"turn.end","turn_id":"T1"}`, `a turn.end event needs "reason"`},
		{"turn.end with a bad reason", `{"type":"turn.end","turn_id":"T1","reason":""}`, `a turn.end event needs "reason"`},
		{"turn.end of another turn", `{"type":"turn.end","turn_id":"T0","reason":"completed"}`, `event's turn_id is "T0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(tc.event)})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("event %s: %v, want ErrInvalid saying %q", tc.event, err, tc.want)
			}
		})
	}
	// The turn is still open: a good event and a proper end go through,
	// and only they reach the app and the history.
	for _, ev := range []string{`{"type":"text","turn_id":"T1","text":"hi"}`, `{"type":"turn.end","turn_id":"T1","reason":"completed","context_id":"` + ctx + `"}`} {
		if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(ev)}); err != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		if got := string(a.event(id)); got != ev {
			t.Fatalf("app got %s, want %s", got, ev)
		}
	}
	turns, _ := history(t, a, ctx)
	if len(turns) != 1 || len(turns[0].Events) != 2 || turns[0].End != "completed" {
		t.Fatalf("history %+v", turns)
	}
}

// TestTurnIDsUniquePerContext: a turn.start reply that names a turn_id
// the context used before, streaming or ended, is refused; the request
// stays open for a reply with a fresh one, and another context may use
// the same id.
func TestTurnIDsUniquePerContext(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(map[string]any{"title": "t"})
	first := startTurn(t, a, k, ks, ctx, "T1", "x")
	second := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "y"})
	k.nextRequest(t)
	if err := ks.Reply(KernelReply{App: "notes", ReqID: second, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "already streaming") {
		t.Fatalf("a second T1 while T1 streams: %v", err)
	}
	endTurnOK(t, a, ks, first)
	err := ks.Reply(KernelReply{App: "notes", ReqID: second, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `turn_id "T1" was used already in session `) {
		t.Fatalf("T1 again once it ended: %v", err)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: second, OK: true, Data: json.RawMessage(`{"turn_id":"T2"}`)}); err != nil {
		t.Fatalf("a fresh turn_id: %v", err)
	}
	a.okReply(second)
	endTurnOK(t, a, ks, second)
	turns, _ := history(t, a, ctx)
	if len(turns) != 2 || turns[0].TurnID != "T1" || turns[1].TurnID != "T2" {
		t.Fatalf("history %+v, want T1 then T2", turns)
	}
	other := a.open(nil)
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, other, "T1", "z"))
}

// TestTurnIDsUniquePerSession: a turn_id is unique within a session: a
// second context of the same titled session may not reuse one its other
// context used, streaming or ended, nor may a context that reopens the
// session once every context of it closed (the ids then come from the
// store, as after a daemon restart). session.history then never holds one
// id twice.
func TestTurnIDsUniquePerSession(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	refused := func(ctx, id string) {
		t.Helper()
		req := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "x"})
		k.nextRequest(t)
		err := ks.Reply(KernelReply{App: "notes", ReqID: req, OK: true, Data: json.RawMessage(`{"turn_id":"` + id + `"}`)})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `turn_id "`+id+`" was used already in session `) {
			t.Fatalf("%s in context %s: %v, want it refused", id, ctx, err)
		}
		if err := ks.Reply(KernelReply{App: "notes", ReqID: req, OK: false, Error: &Error{Code: "internal", Message: "test"}}); err != nil {
			t.Fatal(err)
		}
		a.reply(req)
	}
	one := a.open(map[string]any{"title": "t"})
	two := a.open(map[string]any{"title": "t"})
	streaming := startTurn(t, a, k, ks, one, "T1", "x")
	refused(two, "T1") // streaming in the other context
	endTurnOK(t, a, ks, streaming)
	refused(two, "T1") // ended there
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, two, "T2", "y"))
	refused(one, "T2")

	// Every context closes with the process; the next process reopens the
	// session and the store says what was used.
	h.detach("notes")
	a = h.attach(notesApp("notes"))
	three := a.open(map[string]any{"title": "t"})
	refused(three, "T1")
	refused(three, "T2")
	endTurnOK(t, a, ks, startTurn(t, a, k, ks, three, "T3", "z"))
	turns, _ := history(t, a, three)
	var ids []string
	for _, tu := range turns {
		ids = append(ids, tu.TurnID)
	}
	if strings.Join(ids, ",") != "T1,T2,T3" {
		t.Fatalf("history turn ids %v, want T1,T2,T3", ids)
	}
}

// TestKernelValuesFitAFrame: a kernel's value the daemon writes into an
// app's frame must fit one once re-encoded, where each <, > and & takes
// six bytes; past that the kernel's reply is refused and the request
// stays open for one that fits.
func TestKernelValuesFitAFrame(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	r := a.request(policy.MethodTurnInterrupt, map[string]any{"context_id": ctx, "turn_id": "T9"})
	k.nextRequest(t)
	big := json.RawMessage(`{"text":"` + strings.Repeat("<", 200<<10) + `"}`) // 200 KiB, 1.2 MiB escaped
	if err := ks.Reply(KernelReply{App: "notes", ReqID: r, OK: true, Data: big}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "over the 1048576-byte cap") {
		t.Fatalf("a reply of 200 KiB of '<': %v", err)
	}
	small := json.RawMessage(`{"text":"` + strings.Repeat("<", 20<<10) + `"}`)
	if err := ks.Reply(KernelReply{App: "notes", ReqID: r, OK: true, Data: small}); err != nil {
		t.Fatalf("a reply of 20 KiB of '<': %v", err)
	}
	if got := a.okReply(r); len(got["text"].(string)) != 20<<10 {
		t.Fatalf("the app got %d bytes of text", len(got["text"].(string)))
	}
}

// TestTurnIDReadExactly: the turn_id of an ok reply to turn.start is the
// member named exactly so, as the app reads it; a reply with a member
// that folds to "turn_id" beside it, or in its place, is refused, so that
// the daemon's turn (its events, history and uniqueness) and the app's
// reading of the reply never name two turns. encoding/json's reading took
// "Turn_ID" over "turn_id", and "TURN_ID" alone as the turn's id.
func TestTurnIDReadExactly(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(map[string]any{"title": "t"})
	for i, tc := range []struct{ data, refused string }{
		{`{"turn_id":"T1","Turn_ID":"hidden-1"}`, `has "Turn_ID" beside "turn_id"`},
		{`{"Turn_ID":"hidden-2","turn_id":"T1"}`, `has "Turn_ID" beside "turn_id"`},
		{`{"TURN_ID":"hidden-3"}`, `has "TURN_ID" beside "turn_id"`},
		{`{"turn_id":7}`, `needs data {"turn_id": "..."}`},
		{`{"turn_id":"T1","turn_id":"T2"}`, `duplicate key "turn_id"`},
	} {
		id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": i})
		k.nextRequest(t)
		err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(tc.data)})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.refused) {
			t.Fatalf("reply %s: %v, want it refused with %q", tc.data, err, tc.refused)
		}
		// The request still waits for its reply: a well-formed one starts
		// the turn the app is told of.
		want := fmt.Sprintf("T%d", i)
		if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"` + want + `"}`)}); err != nil {
			t.Fatal(err)
		}
		if got := a.okReply(id)["turn_id"]; got != want || streamingTurn(ks, "notes", id) != want {
			t.Fatalf("the app read turn_id %v, the daemon streams %q; want %s for both", got, streamingTurn(ks, "notes", id), want)
		}
		endTurnOK(t, a, ks, id)
	}
}

// TestLateReplyNeverAnswersANewRequest: a turn request that timed out
// at the kernel keeps its req_id until the kernel's late reply comes
// (refused unknown_request, as docs/protocol.md says) or the kernel
// detaches: a new request under that req_id is a duplicate meanwhile.
// It was taken, and the late reply meant for the first request (another
// context's turn) started the second's.
func TestLateReplyNeverAnswersANewRequest(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KernelTimeout = 50 * time.Millisecond })
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctxA, ctxB := a.open(nil), a.open(nil)
	turn := func(ctx string) {
		a.requestID("r1", policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "x"})
	}
	turn(ctxA)
	k.nextRequest(t)
	a.failReply("r1", frame.CodeTimeout)
	turn(ctxB)
	if e := a.errorFrame(frame.CodeDuplicate, "r1"); !strings.Contains(e.Message, "late reply may still come") {
		t.Fatalf("reused req_id: %q", e.Message)
	}
	err := ks.Reply(KernelReply{App: "notes", ReqID: "r1", OK: true, Data: json.RawMessage(`{"turn_id":"TA"}`)})
	if !errors.Is(err, ErrUnknownRequest) || !strings.Contains(err.Error(), "timed out before this reply came") {
		t.Fatalf("the late reply: %v, want unknown_request", err)
	}
	// Answered late, the req_id is free again.
	turn(ctxB)
	k.nextRequest(t)
	startedB := `{"turn_id":"TB"}`
	if err := ks.Reply(KernelReply{App: "notes", ReqID: "r1", OK: true, Data: json.RawMessage(startedB)}); err != nil {
		t.Fatal(err)
	}
	a.okReply("r1")
	endTurnOK(t, a, ks, "r1")
	// A detach frees the timed-out req_ids too: that kernel replies no more.
	a.requestID("r2", policy.MethodTurnStart, map[string]any{"context_id": ctxA, "input": "x"})
	k.nextRequest(t)
	a.failReply("r2", frame.CodeTimeout)
	ks.Detach()
	a.requestID("r2", policy.MethodTurnStart, map[string]any{"context_id": ctxA, "input": "x"})
	a.failReply("r2", frame.CodeNoKernel)
}
