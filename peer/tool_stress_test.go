package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// scriptedApp is one process of a randomized app: a goroutine that reads
// its hub and answers tool calls at random (ok, error, confirmation then
// ok, silence, double results, late answers), and checks that nothing
// about a call reaches it after its tool_cancel.
type scriptedApp struct {
	a    *testApp
	rng  *rand.Rand
	ctx  chan string // the context its session.open got
	done chan struct{}

	mu   sync.Mutex
	errs []string
}

func (s *scriptedApp) fail(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *scriptedApp) send(f frame.Up) bool {
	b, _ := encodeUp(f)
	_, err := s.a.conn.Write(b)
	return err == nil
}

func (s *scriptedApp) run() {
	defer close(s.done)
	s.send(&frame.Request{ReqID: "open", Method: policy.MethodSessionOpen})
	cancelled := map[string]bool{}
	var later []string // calls it will answer at some later frame
	for {
		line, err := s.a.r.Next()
		if err != nil {
			return // killed
		}
		d, err := decodeDown(line)
		if err != nil {
			s.fail("bad frame %q", line)
			return
		}
		switch f := d.(type) {
		case *frame.Reply:
			if f.ReqID == "open" && f.OK {
				var v struct {
					ContextID string `json:"context_id"`
				}
				json.Unmarshal(f.Data, &v)
				s.ctx <- v.ContextID
			}
		case *frame.ToolCancel:
			if cancelled[f.CallID] {
				s.fail("second tool_cancel for %s", f.CallID)
			}
			cancelled[f.CallID] = true
		case *frame.ToolCall:
			if cancelled[f.CallID] {
				s.fail("tool_call %s after its tool_cancel", f.CallID)
			}
			id := f.CallID
			switch n := s.rng.IntN(10); {
			case n < 3:
				if f.ConfirmRequired && s.rng.IntN(4) > 0 {
					s.send(&frame.ToolResult{CallID: id, AwaitingConfirmation: true})
				}
				s.send(&frame.ToolResult{CallID: id, OK: true, Data: json.RawMessage(`1`)})
			case n < 4:
				s.send(&frame.ToolResult{CallID: id, Error: &Error{Code: "internal", Message: "no"}})
			case n < 5:
				s.send(&frame.ToolResult{CallID: id, OK: true})
				s.send(&frame.ToolResult{CallID: id, OK: true}) // second: ignored
			case n < 6:
				if f.ConfirmRequired {
					s.send(&frame.ToolResult{CallID: id, AwaitingConfirmation: true})
				}
				// then silence: the deadline ends it
			case n < 7:
				// silence
			default:
				later = append(later, id)
			}
		}
		if len(later) > 0 && s.rng.IntN(3) == 0 {
			id := later[0]
			later = later[1:]
			s.send(&frame.ToolResult{CallID: id, AwaitingConfirmation: true})
			s.send(&frame.ToolResult{CallID: id, OK: true, Data: json.RawMessage(`2`)})
		}
	}
}

// TestRandomizedExactlyOneOutcome drives many apps with thousands of
// random calls, cancels, host sheets answered or not, deadlines, app
// kills and restarts and relay swaps. Every accepted call must end in
// exactly one Finished, after exactly one Acknowledged; no app hears of a
// call after its tool_cancel; and when it is over no call, sheet,
// deadline timer or goroutine is left.
func TestRandomizedExactlyOneOutcome(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	const apps, calls = 6, 3000
	h := newHarness(t, func(c *Config) { c.RelayQueue = 1 << 20 })
	rng := rand.New(rand.NewPCG(7, 11))

	var relays []*RecordingToolRelay
	swap := func(installed bool) {
		if !installed {
			h.m.SetToolRelay(nil)
			return
		}
		r := &RecordingToolRelay{}
		relays = append(relays, r)
		h.m.SetToolRelay(r)
	}
	swap(true)

	// Consent first, on a process of its own per app (the scripted app
	// does not answer prompts).
	for i := range apps {
		a := h.attach(toolEntry(fmt.Sprintf("app%d", i)))
		h.grant(a)
		h.detach(a.id)
	}

	// The person: answers sheets at random (allow, deny, now and then
	// remembered), or lets them expire.
	stopPerson := make(chan struct{})
	personDone := make(chan struct{})
	go func() {
		defer close(personDone)
		prng := rand.New(rand.NewPCG(3, 5))
		for {
			select {
			case <-stopPerson:
				return
			case ap := <-h.events.approvals:
				if ap.State != ApprovalPending || ap.Kind != KindTool {
					continue
				}
				d := policy.Allow
				if prng.IntN(3) == 0 {
					d = policy.Deny
				}
				if prng.IntN(5) == 0 {
					continue // left open: the call's deadline ends it
				}
				err := h.m.Approve(ap.ApprovalID, d, prng.IntN(50) == 0)
				if err != nil && !errors.Is(err, ErrUnknownApproval) {
					t.Errorf("approve: %v", err)
				}
			}
		}
	}()

	procs := make([]*scriptedApp, apps)
	var finished []*scriptedApp
	start := func(i int) {
		a := h.attach(toolEntry(fmt.Sprintf("app%d", i)))
		s := &scriptedApp{a: a, rng: rand.New(rand.NewPCG(uint64(i), rng.Uint64())), ctx: make(chan string, 1), done: make(chan struct{})}
		procs[i] = s
		go s.run()
	}
	ctxOf := make([]string, apps)
	for i := range apps {
		start(i)
	}
	for i := range apps {
		ctxOf[i] = <-procs[i].ctx
	}

	type key struct{ app, id string }
	accepted := map[key]bool{}
	var ids []key
	risks := []string{RiskRead, RiskWrite, RiskDestructive, "", "odd"}
	confirms := []string{ConfirmNone, ConfirmNone, ConfirmApp, ConfirmHost}
	tools := []string{"notes.search", "notes.append", "notes.wipe"}
	relayOn := true
	for n := range calls {
		i := rng.IntN(apps)
		app := fmt.Sprintf("app%d", i)
		switch r := rng.IntN(200); {
		case r < 2: // kill and restart the app's process
			procs[i].a.conn.Close()
			<-procs[i].done
			h.detach(app)
			finished = append(finished, procs[i])
			start(i)
			ctxOf[i] = <-procs[i].ctx
		case r < 5: // swap the relay (or leave none for a while)
			relayOn = !relayOn || rng.IntN(2) == 0
			swap(relayOn)
		case r < 25 && len(ids) > 0: // cancel a recent call
			k := ids[len(ids)-1-rng.IntN(min(len(ids), 20))]
			if err := h.m.ToolCancel(k.app, k.id); err != nil && !errors.Is(err, ErrUnknownCall) {
				t.Fatalf("cancel: %v", err)
			}
		}
		c := KernelToolCall{
			CallID: fmt.Sprintf("c%d", n), Name: tools[rng.IntN(len(tools))], Args: json.RawMessage(`{}`),
			Risk: risks[rng.IntN(len(risks))], Confirm: confirms[rng.IntN(len(confirms))],
			TimeoutMS: 5 + rng.Int64N(100), ContextID: ctxOf[i], Caller: "stress",
		}
		err := h.m.ToolCall(app, c)
		switch {
		case err == nil:
			accepted[key{app, c.CallID}] = true
			ids = append(ids, key{app, c.CallID})
		case errors.Is(err, ErrDeclined):
			// a remembered deny is not a refusal: it is accepted. Nothing
			// here declines (every tool is granted).
			t.Fatalf("declined: %v", err)
		default:
			t.Fatalf("call %s: %v", c.CallID, err)
		}
	}
	// The end: every process dies, so every call still out ends now.
	for i := range apps {
		procs[i].a.conn.Close()
		<-procs[i].done
		h.detach(fmt.Sprintf("app%d", i))
		finished = append(finished, procs[i])
	}
	swap(true)
	close(stopPerson)
	<-personDone

	// Exactly one ack, then exactly one outcome, per accepted call.
	acks, fins := map[key]int{}, map[key]int{}
	total := 0
	for _, r := range relays {
		for _, e := range r.Events() {
			total++
			k := key{e.App, e.CallID}
			if !accepted[k] {
				t.Fatalf("callback for a call never accepted: %v", e)
			}
			if e.Finished == nil {
				if acks[k]++; acks[k] > 1 || fins[k] > 0 {
					t.Fatalf("%v: acknowledged twice or after its outcome", e)
				}
				continue
			}
			if fins[k]++; fins[k] > 1 || acks[k] != 1 {
				t.Fatalf("%v: second outcome, or outcome before acknowledgement", e)
			}
		}
	}
	outcomes := map[Outcome]int{}
	for _, r := range relays {
		for _, e := range r.Events() {
			if e.Finished != nil {
				outcomes[e.Finished.Outcome]++
			}
		}
	}
	for k := range accepted {
		if fins[k] != 1 {
			t.Fatalf("%v: %d outcomes", k, fins[k])
		}
	}
	for _, s := range finished {
		for _, e := range s.errs {
			t.Error(e)
		}
	}
	t.Logf("%d calls accepted, %d callbacks over %d relays; outcomes %v", len(accepted), total, len(relays), outcomes)

	// Nothing outlives its call.
	h.m.mu.Lock()
	left := 0
	var peers []string
	for id := range h.m.peers {
		peers = append(peers, id)
	}
	h.m.mu.Unlock()
	for _, id := range peers {
		h.m.inspect(id, func(p *peer) {
			left += len(p.approvals)
			if p.link != nil {
				left += len(p.link.calls)
			}
		})
	}
	if left != 0 {
		t.Fatalf("%d calls or sheets left", left)
	}
	// A deadline that fired as its call ended finishes at once; one
	// whose count was never settled holds Close up.
	h.close()
	goleak.VerifyNone(t, ignore)
}
