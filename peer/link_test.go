package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// TestErrorCodes produces each error code (docs/protocol.md) of the request path with
// a request that should produce it. (confirmation_skipped belongs to tool
// calls.)
func TestErrorCodes(t *testing.T) {
	t.Run("bad_frame", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		a.write("not json\n")
		a.errorFrame(frame.CodeBadFrame, "")
		a.write(`{"octos_peer":{"type":"request","req_id":"r7","method":"octos.session.open","args":[]}}` + "\n")
		a.errorFrame(frame.CodeBadFrame, "r7")
		h.grant(a)
		id := a.request(policy.MethodSessionOpen, map[string]any{"title": 5})
		a.failReply(id, frame.CodeBadFrame)
	})
	t.Run("unknown_method", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		a.failReply(a.request("octos.files.delete", nil), frame.CodeUnknownMethod)
	})
	t.Run("not_granted method", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		app.Grants.Methods = []string{policy.MethodSessionOpen}
		a := h.attach(app)
		a.failReply(a.request(policy.MethodTurnStart, map[string]any{"context_id": "x", "input": "hi"}), frame.CodeNotGranted)
		h.events.noApproval(t)
	})
	t.Run("not_granted service", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		app.Grants.Services = nil
		a := h.attach(app)
		e := a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeNotGranted)
		if !strings.Contains(e.Message, policy.ServiceAgent) {
			t.Fatalf("message %q does not name the service", e.Message)
		}
		// developer_mode grants every service.
		h.m.SetManifest(&policy.Manifest{Version: 1, DeveloperMode: true, Apps: []policy.App{app}})
		a.request(policy.MethodSessionOpen, nil)
		h.events.nextApproval(t)
	})
	t.Run("not_granted after reload", func(t *testing.T) {
		h := newHarness(t, nil)
		app := notesApp("notes")
		a := h.attach(app)
		h.grant(a)
		app.Grants.Methods = []string{policy.MethodSessionOpen}
		h.m.SetManifest(&policy.Manifest{Version: 1, Apps: []policy.App{app}})
		a.failReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": "x"}), frame.CodeNotGranted)
	})
	t.Run("not_granted account", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		h.grant(a)
		a.failReply(a.request(policy.MethodSessionOpen, map[string]any{"account": "bank"}), frame.CodeNotGranted)
	})
	t.Run("consent_required", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ConsentTimeout = 50 * time.Millisecond })
		a := h.attach(notesApp("notes"))
		id := a.request(policy.MethodSessionOpen, nil)
		if ap := h.events.nextApproval(t); ap.State != ApprovalPending {
			t.Fatalf("%+v", ap)
		}
		a.failReply(id, frame.CodeConsentRequired)
		if ap := h.events.nextApproval(t); ap.State != ApprovalExpired {
			t.Fatalf("%+v", ap)
		}
		if _, ok, _ := h.store.Consent("notes"); ok {
			t.Fatal("an expired prompt persisted a decision")
		}
		// The next request asks again.
		a.request(policy.MethodSessionOpen, nil)
		if ap := h.events.nextApproval(t); ap.State != ApprovalPending {
			t.Fatalf("%+v", ap)
		}
	})
	t.Run("consent_denied", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		id := a.request(policy.MethodSessionOpen, nil)
		ap := h.events.nextApproval(t)
		if err := h.m.Approve(ap.ApprovalID, policy.Deny, false); err != nil {
			t.Fatal(err)
		}
		a.failReply(id, frame.CodeConsentDenied)
		a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeConsentDenied)
		h.events.nextApproval(t) // denied
		h.events.noApproval(t)
	})
	t.Run("unknown_context", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		h.grant(a)
		a.failReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": "n0nce-99"}), frame.CodeUnknownContext)
	})
	t.Run("duplicate", func(t *testing.T) {
		h := newHarness(t, nil)
		k, ks := h.kernel()
		a := h.attach(notesApp("notes"))
		h.grant(a)
		ctx := a.open(nil)
		a.requestID("t1", policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"})
		k.nextRequest(t)
		a.requestID("t1", policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "again"})
		a.errorFrame(frame.CodeDuplicate, "t1")
		if err := ks.Reply(KernelReply{App: "notes", ReqID: "t1", OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); err != nil {
			t.Fatal(err)
		}
		a.okReply("t1")
	})
	t.Run("no_kernel", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		h.grant(a)
		ctx := a.open(nil)
		a.failReply(a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"}), frame.CodeNoKernel)
		k := newFakeKernel()
		k.refuse = true
		ks, err := h.m.AttachKernel(k, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ks.Detach()
		a.failReply(a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"}), frame.CodeNoKernel)
	})
	t.Run("timeout", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.KernelTimeout = 50 * time.Millisecond })
		k, ks := h.kernel()
		a := h.attach(notesApp("notes"))
		h.grant(a)
		ctx := a.open(nil)
		id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"})
		k.nextRequest(t)
		a.failReply(id, frame.CodeTimeout)
		err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T"}`)})
		if !errors.Is(err, ErrUnknownRequest) {
			t.Fatalf("late reply: %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		h := newHarness(t, nil)
		k, _ := h.kernel()
		a := h.attach(notesApp("notes"))
		h.grant(a)
		ctx := a.open(nil)
		id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"})
		k.nextRequest(t)
		cl := a.request(policy.MethodContextClose, map[string]any{"context_id": ctx})
		a.failReply(id, frame.CodeCancelled)
		if cc, ok := a.next().(*frame.ContextClosed); !ok || cc.ContextID != ctx || cc.Reason != "closed_by_app" {
			t.Fatalf("want context_closed, got %#v", cc)
		}
		a.okReply(cl)
		if got := k.nextClosed(t); got != "notes "+ctx+" closed_by_app" {
			t.Fatalf("kernel: %q", got)
		}
	})
	t.Run("internal", func(t *testing.T) {
		h := newHarness(t, nil)
		a := h.attach(notesApp("notes"))
		h.grant(a)
		h.store.Close() // the disk went away under the daemon
		a.failReply(a.request(policy.MethodSessionOpen, nil), frame.CodeInternal)
	})
}

// TestFramingOnLink runs the framing edge cases through a real link: the
// daemon answers each and keeps reading.
func TestFramingOnLink(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	h.grant(a)
	bad := []string{
		"",    // empty line
		"[1]", // not an object
		`{"octos_peer":{"type":"request","req_id":1,"method":"m"}}`, // wrong type
		`{"a":1}{"b":2}`,   // two objects on a line
		"{\"a\":\"\xfe\"}", // invalid UTF-8
		`{"octos_peer":{"type":"request","req_id":"x","req_id":"y","method":"m"}}`,
	}
	for _, line := range bad {
		a.write(line + "\n")
		a.errorFrame(frame.CodeBadFrame, "")
	}
	// Over the cap, then a request: refused, then answered.
	over := append(passthroughOfSize(frame.MaxFrame+1), '\n')
	go a.conn.Write(over) // the daemon reads it while we wait for the answer
	a.errorFrame(frame.CodeBadFrame, "")
	ctx := a.open(nil)
	// A pass-through frame at the cap fits a hub line but not a control
	// line once wrapped in its app.frame event: refused. One of the most
	// a relayed value may take reaches the shell whole.
	go a.conn.Write(append(passthroughOfSize(frame.MaxFrame), '\n'))
	a.errorFrame(frame.CodeBadFrame, "")
	exact := passthroughOfSize(relayRoom)
	go a.conn.Write(append(bytes.Clone(exact), '\n'))
	select {
	case f := <-h.events.frames:
		if f.app != "notes" || !bytes.Equal(f.frame, exact) {
			t.Fatalf("pass-through frame changed (%d bytes)", len(f.frame))
		}
	case <-time.After(wait):
		t.Fatal("no app.frame")
	}
	// Many frames in one write, and one frame split over many writes.
	var batch bytes.Buffer
	for i := range 50 {
		line, _ := encodeUp(&frame.Request{ReqID: fmt.Sprintf("b%d", i), Method: policy.MethodSessionHistory,
			Args: json.RawMessage(`{"context_id":"` + ctx + `"}`)})
		batch.Write(line)
	}
	a.write(batch.String())
	for i := range 50 {
		a.okReply(fmt.Sprintf("b%d", i))
	}
	line, _ := encodeUp(&frame.Request{ReqID: "split", Method: policy.MethodSessionHistory, Args: json.RawMessage(`{"context_id":"` + ctx + `"}`)})
	for _, b := range line {
		a.write(string([]byte{b}))
	}
	a.okReply("split")
}

// TestSpoofedIdentity: identity members an app adds are refused by strict
// decoding, so they change nothing; what the kernel sees comes from the
// daemon's records.
func TestSpoofedIdentity(t *testing.T) {
	h := newHarness(t, nil)
	k, _ := h.kernel()
	a := h.attach(notesApp("notes"))
	for _, field := range []string{"app", "client", "account", "caller"} {
		a.write(`{"octos_peer":{"type":"request","req_id":"s1","method":"octos.session.open","` + field + `":"mail"}}` + "\n")
		a.errorFrame(frame.CodeBadFrame, "s1")
	}
	h.events.noApproval(t) // nothing reached the request path
	h.grant(a)
	ctx := a.open(map[string]any{"account": "work"})
	for _, field := range []string{"app", "client", "account", "caller"} {
		id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi", field: "mail"})
		a.failReply(id, frame.CodeBadFrame)
	}
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "hi"})
	r := k.nextRequest(t)
	if r.App != "notes" || r.Account != "work" || r.ContextID != ctx || r.ReqID != id {
		t.Fatalf("kernel saw %+v", r)
	}
	select {
	case extra := <-k.requests:
		t.Fatalf("a spoofed request reached the kernel: %+v", extra)
	default:
	}
}

// TestContextOwnership: another app's context, a closed one and a made-up
// one all answer unknown_context the same way.
func TestContextOwnership(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	b := h.attach(notesApp("mail"))
	h.grant(a)
	h.grant(b)
	ctxA := a.open(nil)
	closed := a.open(nil)
	cl := a.request(policy.MethodContextClose, map[string]any{"context_id": closed})
	a.next() // context_closed
	a.okReply(cl)
	answers := map[string]string{}
	for name, id := range map[string]string{"other app's": ctxA, "closed": closed, "made-up": "n0nce-4242"} {
		e := b.failReply(b.request(policy.MethodSessionHistory, map[string]any{"context_id": id}), frame.CodeUnknownContext)
		answers[name] = strings.Replace(e.Message, id, "ID", 1)
	}
	if answers["other app's"] != answers["closed"] || answers["closed"] != answers["made-up"] {
		t.Fatalf("answers differ: %q", answers)
	}
	// The owner still uses it.
	a.okReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": ctxA}))
}

// TestConsentOnce: many first requests at once raise one approval, and
// all of them run once it is allowed, in order.
func TestConsentOnce(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	var batch bytes.Buffer
	for i := range 20 {
		line, _ := encodeUp(&frame.Request{ReqID: fmt.Sprintf("c%d", i), Method: policy.MethodSessionOpen})
		batch.Write(line)
	}
	a.write(batch.String())
	ap := h.events.nextApproval(t)
	if ap.Kind != KindConsent || ap.App != "notes" || ap.State != ApprovalPending {
		t.Fatalf("%+v", ap)
	}
	// Every request is read before the answer: list shows one approval.
	until(t, "all requests waiting", func() bool {
		n := 0
		h.m.inspect("notes", func(p *peer) { n = len(p.waiting) })
		return n == 20
	})
	if got := h.m.Approvals(); len(got) != 1 || got[0].ApprovalID != ap.ApprovalID {
		t.Fatalf("approvals: %+v", got)
	}
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 20 {
		ctx := a.okReply(fmt.Sprintf("c%d", i))["context_id"].(string)
		if seen[ctx] || !strings.HasPrefix(ctx, "n0nce-") {
			t.Fatalf("context id %q", ctx)
		}
		seen[ctx] = true
	}
	if s := h.events.nextApproval(t); s.State != ApprovalAllowed {
		t.Fatalf("%+v", s)
	}
	h.events.noApproval(t)
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); !errors.Is(err, ErrUnknownApproval) {
		t.Fatalf("second answer: %v", err)
	}
}

// TestConsentAppDies: a prompt whose app dies persists nothing; the
// restarted process is asked again.
func TestConsentAppDies(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(t)
	h.detach("notes")
	if s := h.events.nextApproval(t); s.ApprovalID != ap.ApprovalID || s.State != ApprovalCancelled {
		t.Fatalf("%+v", s)
	}
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); !errors.Is(err, ErrUnknownApproval) {
		t.Fatalf("answer after death: %v", err)
	}
	if _, ok, _ := h.store.Consent("notes"); ok {
		t.Fatal("persisted a decision")
	}
	b := h.attach(notesApp("notes"))
	b.request(policy.MethodSessionOpen, nil)
	if s := h.events.nextApproval(t); s.State != ApprovalPending || s.ApprovalID == ap.ApprovalID {
		t.Fatalf("%+v", s)
	}
}

// TestConsentRevoke: revoking makes the next request ask again.
func TestConsentRevoke(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	h.grant(a)
	list, err := h.m.Consents()
	if err != nil || len(list) != 1 || list[0].App != "notes" || list[0].Decision != policy.Allow {
		t.Fatalf("consents %+v %v", list, err)
	}
	if found, err := h.m.RevokeConsent("notes"); err != nil || !found {
		t.Fatalf("revoke: %v %v", found, err)
	}
	a.request(policy.MethodSessionOpen, nil)
	if s := h.events.nextApproval(t); s.State != ApprovalPending {
		t.Fatalf("%+v", s)
	}
}

// TestConsentSurvivesRestart: a decision survives the daemon: the store is
// reopened by a new Manager in this process, then by a real second
// process.
func TestConsentSurvivesRestart(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	h.grant(a)
	// While this daemon holds the state, another one is refused clearly.
	if out := runChildProcess(t, h.path, "open"); !strings.Contains(out, "in_use") {
		t.Fatalf("second daemon while the first runs: %q", out)
	}
	h.m.Close()
	h.store.Close()

	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: h.path})
	if err != nil {
		t.Fatal(err)
	}
	ev := newFakeEvents()
	m := New(Config{Store: store, Events: ev})
	h2 := &harness{t: t, m: m, store: store, events: ev}
	b := h2.attach(notesApp("notes"))
	b.open(nil)
	ev.noApproval(t)
	m.Close()
	store.Close()

	if out := runChildProcess(t, h.path, "open"); !strings.HasPrefix(out, "ok ") {
		t.Fatalf("second process: %q", out)
	}
}

const childEnv = "OCTOSUP_PEER_TEST_CHILD"

func runChildProcess(t *testing.T, path, what string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+what, "OCTOSUP_PEER_TEST_STATE="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// runChild is a second daemon: it opens the state, attaches an app and
// opens a session, printing "ok CONTEXT" if no consent prompt was needed,
// "asked" if one was, "in_use" if the state is locked.
func runChild() int {
	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: os.Getenv("OCTOSUP_PEER_TEST_STATE")})
	if errors.Is(err, policy.ErrStateInUse) {
		fmt.Println("in_use")
		return 0
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	ev := newFakeEvents()
	m := New(Config{Store: store, Events: ev, ConsentTimeout: time.Second})
	defer m.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	m.Attach(notesApp("notes"), os.NewFile(uintptr(fds[0]), "hub"))
	app := os.NewFile(uintptr(fds[1]), "app")
	defer app.Close()
	line, _ := encodeUp(&frame.Request{ReqID: "x", Method: policy.MethodSessionOpen})
	app.Write(line)
	r := frame.NewReader(app, frame.MaxFrame)
	got, err := r.Next()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	d, err := decodeDown(got)
	if rp, ok := d.(*frame.Reply); err == nil && ok && rp.OK {
		var data struct {
			ContextID string `json:"context_id"`
		}
		json.Unmarshal(rp.Data, &data)
		fmt.Println("ok", data.ContextID)
		return 0
	}
	if len(ev.approvals) > 0 {
		fmt.Println("asked")
		return 0
	}
	fmt.Printf("unexpected %s\n", got)
	return 1
}

// TestTurnStream: a turn through the kernel, its events in order, its end,
// its history; then an interrupt.
func TestTurnStream(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(map[string]any{"title": "groceries"})
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "what do I need?"})
	r := k.nextRequest(t)
	if r.Method != policy.MethodTurnStart || string(r.Args) != `{"context_id":"`+ctx+`","input":"what do I need?"}` {
		t.Fatalf("kernel got %+v (%s)", r, r.Args)
	}
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(`{"type":"text"}`)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("event before reply: %v", err)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"note":1}`)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reply without turn_id: %v", err)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)}); err != nil {
		t.Fatal(err)
	}
	if got := a.okReply(id)["turn_id"]; got != "T1" {
		t.Fatalf("turn_id %v", got)
	}
	for i := range 5 {
		ev := fmt.Sprintf(`{"type":"text","n":%d}`, i)
		if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(ev)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(`{"type":"turn.end","turn_id":"T1","reason":"completed"}`)}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got := string(a.event(id)); got != fmt.Sprintf(`{"type":"text","n":%d}`, i) {
			t.Fatalf("event %d: %s", i, got)
		}
	}
	a.event(id)
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id, Event: json.RawMessage(`{}`)}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("event after turn.end: %v", err)
	}
	hist := a.okReply(a.request(policy.MethodSessionHistory, map[string]any{"context_id": ctx}))
	turns := hist["turns"].([]any)
	if len(turns) != 1 || turns[0].(map[string]any)["turn_id"] != "T1" || len(turns[0].(map[string]any)["events"].([]any)) != 6 {
		t.Fatalf("history %v", hist)
	}

	// Interrupt: reaches the kernel, ends the stream, then the reply.
	id2 := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "more"})
	k.nextRequest(t)
	ks.Reply(KernelReply{App: "notes", ReqID: id2, OK: true, Data: json.RawMessage(`{"turn_id":"T2"}`)})
	a.okReply(id2)
	in := a.request(policy.MethodTurnInterrupt, map[string]any{"context_id": ctx, "turn_id": "T2"})
	if r := k.nextRequest(t); r.Method != policy.MethodTurnInterrupt || r.ReqID != in {
		t.Fatalf("kernel got %+v", r)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: in, OK: true}); err != nil {
		t.Fatal(err)
	}
	if got := string(a.event(id2)); got != `{"reason":"interrupted","turn_id":"T2","type":"turn.end"}` {
		t.Fatalf("end event %s", got)
	}
	if r := a.reply(in); !r.OK {
		t.Fatalf("interrupt reply %+v", r)
	}
	if err := ks.Event(KernelEvent{App: "notes", ReqID: id2, Event: json.RawMessage(`{}`)}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("event after interrupt: %v", err)
	}

	// A reopened session by title keeps its history (also across processes).
	h.detach("notes")
	k.nextClosed(t)
	b := h.attach(notesApp("notes"))
	ctx2 := b.open(map[string]any{"title": "groceries"})
	if ctx2 == ctx {
		t.Fatal("context id reused")
	}
	hist = b.okReply(b.request(policy.MethodSessionHistory, map[string]any{"context_id": ctx2}))
	if n := len(hist["turns"].([]any)); n != 2 {
		t.Fatalf("history after restart: %d turns", n)
	}
}

// TestKernelDetachMidTurn: a kernel that goes away fails what it held.
func TestKernelDetachMidTurn(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	streaming := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "1"})
	k.nextRequest(t)
	ks.Reply(KernelReply{App: "notes", ReqID: streaming, OK: true, Data: json.RawMessage(`{"turn_id":"T1"}`)})
	a.okReply(streaming)
	ks.Event(KernelEvent{App: "notes", ReqID: streaming, Event: json.RawMessage(`{"type":"text"}`)})
	a.event(streaming)
	waiting := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "2"})
	k.nextRequest(t)
	ks.Detach()
	if got := string(a.event(streaming)); !strings.Contains(got, `"reason":"kernel_detached"`) {
		t.Fatalf("end event %s", got)
	}
	a.failReply(waiting, frame.CodeNoKernel)
	if err := ks.Reply(KernelReply{App: "notes", ReqID: waiting, OK: true}); !errors.Is(err, ErrKernelDetached) {
		t.Fatalf("reply after detach: %v", err)
	}
	// A new kernel may attach; only one at a time.
	_, ks2 := h.kernel()
	if _, err := h.m.AttachKernel(newFakeKernel(), nil); !errors.Is(err, ErrKernelAttached) {
		t.Fatalf("second kernel: %v", err)
	}
	ks2.Detach()
}

// TestDeath: a dead process's contexts close (the kernel told), its open
// requests end, and the restarted one keeps peer and consent but has no
// contexts.
func TestDeath(t *testing.T) {
	h := newHarness(t, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	id := a.request(policy.MethodTurnStart, map[string]any{"context_id": ctx, "input": "1"})
	k.nextRequest(t)
	if st := h.m.LinkStatus("notes"); !st.Connected || st.Contexts != 2 { // grant opened one
		t.Fatalf("status %+v", st)
	}
	h.detach("notes")
	closed := k.nextClosed(t) + "|" + k.nextClosed(t)
	if closed != "notes n0nce-1 app_exited|notes "+ctx+" app_exited" {
		t.Fatalf("kernel: %q", closed)
	}
	if err := ks.Reply(KernelReply{App: "notes", ReqID: id, OK: true, Data: json.RawMessage(`{"turn_id":"T"}`)}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("reply to a dead app: %v", err)
	}
	if st := h.m.LinkStatus("notes"); st.Connected {
		t.Fatalf("status %+v", st)
	}
	b := h.attach(notesApp("notes"))
	b.failReply(b.request(policy.MethodSessionHistory, map[string]any{"context_id": ctx}), frame.CodeUnknownContext)
	b.open(nil) // no new consent prompt
	h.events.noApproval(t)
	// The app closing its own end is a death too.
	b.conn.Close()
	k.nextClosed(t)
	until(t, "link down", func() bool { return !h.m.LinkStatus("notes").Connected })
}

// TestFloodNeverReads: an app that floods requests and never reads its
// replies is disconnected with a logged reason; another app is served
// throughout.
func TestFloodNeverReads(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.QueueFrames = 16; c.WriteTimeout = 2 * time.Second })
	flood := h.attach(notesApp("flood"))
	other := h.attach(notesApp("other"))
	h.grant(flood)
	h.grant(other)
	line, _ := encodeUp(&frame.Request{ReqID: "same", Method: policy.MethodSessionHistory, Args: json.RawMessage(`{"context_id":"nope"}`)})
	batch := bytes.Repeat(line, 256)
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := flood.conn.Write(batch); err != nil {
				errc <- err
				return
			}
		}
	}()
	// Served while the flood goes on.
	for range 20 {
		other.open(nil)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Logf("flooder's write ended with %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the flooding app was never disconnected")
	}
	until(t, "flood link down", func() bool { return !h.m.LinkStatus("flood").Connected })
	logged := h.logs.FilterMessage("link down").FilterField(zap.String("app", "flood")).All()
	if len(logged) != 1 || !strings.Contains(logged[0].ContextMap()["reason"].(string), "not read") {
		t.Fatalf("logged %+v", logged)
	}
	other.open(nil)
}

// TestPassThrough: other frames go to the shell unchanged; app.send writes
// them down but never a peer-link frame.
func TestPassThrough(t *testing.T) {
	h := newHarness(t, nil)
	a := h.attach(notesApp("notes"))
	frame := `{"ui": {"badge": 3, "text": "é"}}`
	a.write(frame + "\n")
	select {
	case f := <-h.events.frames:
		if f.app != "notes" || string(f.frame) != frame {
			t.Fatalf("got %s %s", f.app, f.frame)
		}
	case <-time.After(wait):
		t.Fatal("no app.frame")
	}
	if err := h.m.Send("notes", json.RawMessage(`{"ui": {"show": true}}`), nil); err != nil {
		t.Fatal(err)
	}
	if got := string(a.nextLine()); got != `{"ui":{"show":true}}` {
		t.Fatalf("app got %s", got)
	}
	for _, bad := range []string{`{"octos_peer":{"type":"reply","req_id":"r1","ok":true}}`, `[1]`, `{"a":1,"a":2}`, `nope`, `{"Octos_Peer":{"type":"reply","req_id":"r1","ok":true}}`} {
		if err := h.m.Send("notes", json.RawMessage(bad), nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("send %s: %v", bad, err)
		}
	}
	if err := h.m.Send("mail", json.RawMessage(`{}`), nil); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("send to nobody: %v", err)
	}
	h.events.noApproval(t)
}

// passthroughOfSize is a valid JSON object of exactly n bytes.
func passthroughOfSize(n int) []byte {
	const head, tail = `{"pad":"`, `"}`
	return []byte(head + strings.Repeat("p", n-len(head)-len(tail)) + tail)
}

// TestRefusalsOfLongNamesFitAFrame: a refusal quotes the name the app
// chose (a member's, a type, a method), and quoting with the frame's
// escapes grows some characters sixfold (U+0085: 2 bytes, then
// "\\u0085"): a line of 400 KB made an error frame past 1 MiB, which was
// dropped, and the app heard nothing (or an internal error in place of
// its reply's code). The message is cut to 1024 bytes instead.
func TestRefusalsOfLongNamesFitAFrame(t *testing.T) {
	name := strings.Repeat("\u0085", 200000)
	for _, tc := range []struct{ what, line, code string }{
		{"unknown member", `{"octos_peer":{"type":"request","req_id":"r1","method":"octos.session.open","` + name + `":1}}`, frame.CodeBadFrame},
		{"unknown type", `{"octos_peer":{"type":"` + name + `","req_id":"r2"}}`, frame.CodeBadFrame},
		{"member beside the envelope", `{"octos_peer":{"type":"request","req_id":"r3","method":"m"},"` + name + `":1}`, frame.CodeBadFrame},
		{"unknown method", `{"octos_peer":{"type":"request","req_id":"r4","method":"` + name + `"}}`, frame.CodeUnknownMethod},
		{"unknown member of args", `{"octos_peer":{"type":"request","req_id":"r5","method":"octos.session.open","args":{"` + name + `":1}}}`, frame.CodeBadFrame},
	} {
		t.Run(tc.what, func(t *testing.T) {
			h := newHarness(t, nil)
			a := h.attach(notesApp("notes"))
			h.grant(a)
			a.write(tc.line + "\n")
			var code, msg string
			switch d := a.next().(type) {
			case *frame.ErrorFrame:
				code, msg = d.Code, d.Message
			case *frame.Reply:
				if d.Error != nil {
					code, msg = d.Error.Code, d.Error.Message
				}
			}
			if code != tc.code || len(msg) > 1024+len("…") || !strings.HasSuffix(msg, "…") {
				t.Fatalf("got %s with a message of %d bytes (%.80q…), want %s cut to 1024 bytes", code, len(msg), msg, tc.code)
			}
			if n := h.logs.FilterMessageSnippet("encode down frame").Len(); n != 0 {
				t.Fatalf("%d frames did not encode", n)
			}
		})
	}
}
