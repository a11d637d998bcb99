package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

// wait bounds every blocking step of a test: a broken daemon fails the
// test instead of hanging it.
const wait = 10 * time.Second

// fakeEvents records what the daemon publishes.
type fakeEvents struct {
	approvals chan Approval
	frames    chan appFrame
}

type appFrame struct {
	app   string
	frame json.RawMessage
}

func newFakeEvents() *fakeEvents {
	return &fakeEvents{approvals: make(chan Approval, 1000), frames: make(chan appFrame, 1000)}
}

func (e *fakeEvents) Approval(a Approval) { e.approvals <- a }
func (e *fakeEvents) AppFrame(app string, f json.RawMessage) {
	e.frames <- appFrame{app, f}
}

func (e *fakeEvents) nextApproval(t testing.TB) Approval {
	t.Helper()
	select {
	case a := <-e.approvals:
		return a
	case <-time.After(wait):
		t.Fatal("no approval event")
	}
	return Approval{}
}

func (e *fakeEvents) noApproval(t testing.TB) {
	t.Helper()
	select {
	case a := <-e.approvals:
		t.Fatalf("unexpected approval event %+v", a)
	default:
	}
}

// fakeKernel records what the daemon hands the kernel.
type fakeKernel struct {
	requests chan KernelRequest
	closed   chan string // "app context reason"
	refuse   bool
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{requests: make(chan KernelRequest, 1000), closed: make(chan string, 1000)}
}

func (k *fakeKernel) Request(r KernelRequest) error {
	if k.refuse {
		return errors.New("kernel queue full")
	}
	k.requests <- r
	return nil
}

func (k *fakeKernel) ContextClosed(app, id, reason string) {
	k.closed <- app + " " + id + " " + reason
}

func (k *fakeKernel) nextRequest(t testing.TB) KernelRequest {
	t.Helper()
	select {
	case r := <-k.requests:
		return r
	case <-time.After(wait):
		t.Fatal("kernel got no request")
	}
	return KernelRequest{}
}

func (k *fakeKernel) nextClosed(t testing.TB) string {
	t.Helper()
	select {
	case s := <-k.closed:
		return s
	case <-time.After(wait):
		t.Fatal("kernel got no context.closed")
	}
	return ""
}

type harness struct {
	t      testing.TB
	m      *Manager
	store  *policy.Store
	events *fakeEvents
	logs   *observer.ObservedLogs
	path   string
}

func newHarness(t testing.TB, tweak func(*Config)) *harness {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", policy.StoreFile)
	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	h := &harness{t: t, store: store, events: newFakeEvents(), logs: logs, path: path}
	cfg := Config{Store: store, Events: h.events, Log: zap.New(core), Nonce: "n0nce"}
	if tweak != nil {
		tweak(&cfg)
	}
	h.m = New(cfg)
	t.Cleanup(func() {
		h.close()
		h.store.Close()
	})
	return h
}

// close closes the Manager, failing the test if that takes over 10s:
// Close waits for every deadline not stopped, and one a test left armed
// would hold it up until it fires.
func (h *harness) close() {
	h.t.Helper()
	closed := make(chan struct{})
	go func() { h.m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		h.t.Fatal("Manager.Close waited over 10s: a deadline is still armed")
	}
}

// notesApp is a manifest entry with everything granted.
func notesApp(id string) policy.App {
	return policy.App{
		ID:   id,
		Exec: []string{"/bin/true"},
		Grants: policy.Grants{
			Services: []string{policy.ServiceAgent},
			Methods:  policy.KnownMethods(),
		},
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Accounts: []string{"personal", "work"}},
	}
}

// testApp is the app's end of a real hub socketpair.
type testApp struct {
	t    testing.TB
	id   string
	conn net.Conn
	r    *frame.Reader
	seq  int
}

// attach makes a socketpair, hands the daemon its end as the supervisor
// does, and returns the app's end.
// holdPeer locks app's peer as a step does, so that nothing of the app
// runs (a link's teardown included) until release.
func (h *harness) holdPeer(app string) (release func()) {
	p := h.m.peerOf(app)
	p.mu.Lock()
	return p.mu.Unlock
}

func (h *harness) attach(app policy.App) *testApp {
	h.t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	daemonEnd := os.NewFile(uintptr(fds[0]), "hub-daemon")
	appFile := os.NewFile(uintptr(fds[1]), "hub-app")
	conn, err := net.FileConn(appFile)
	appFile.Close()
	if err != nil {
		h.t.Fatal(err)
	}
	h.m.Attach(app, daemonEnd)
	a := &testApp{t: h.t, id: app.ID, conn: conn, r: frame.NewReader(conn, frame.MaxFrame)}
	h.t.Cleanup(func() { conn.Close() })
	return a
}

func (a *testApp) write(s string) {
	a.t.Helper()
	if _, err := a.conn.Write([]byte(s)); err != nil {
		a.t.Fatalf("app write: %v", err)
	}
}

// request sends a request and returns its req_id.
func (a *testApp) request(method string, args any) string {
	a.t.Helper()
	a.seq++
	id := fmt.Sprintf("r%d", a.seq)
	a.requestID(id, method, args)
	return id
}

func (a *testApp) requestID(id, method string, args any) {
	a.t.Helper()
	var raw json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			a.t.Fatal(err)
		}
		raw = b
	}
	line, err := encodeUp(&frame.Request{ReqID: id, Method: method, Args: raw})
	if err != nil {
		a.t.Fatal(err)
	}
	a.write(string(line))
}

// next reads the next line the daemon sent.
func (a *testApp) nextLine() []byte {
	a.t.Helper()
	a.conn.SetReadDeadline(time.Now().Add(wait))
	line, err := a.r.Next()
	if err != nil {
		a.t.Fatalf("app %s read: %v", a.id, err)
	}
	return bytes.Clone(line)
}

func (a *testApp) next() frame.Down {
	a.t.Helper()
	line := a.nextLine()
	d, err := decodeDown(line)
	if err != nil {
		a.t.Fatalf("app %s got a bad frame %q: %v", a.id, line, err)
	}
	return d
}

func (a *testApp) reply(reqID string) *frame.Reply {
	a.t.Helper()
	d := a.next()
	r, ok := d.(*frame.Reply)
	if !ok || r.ReqID != reqID {
		a.t.Fatalf("want reply to %s, got %#v", reqID, d)
	}
	return r
}

func (a *testApp) okReply(reqID string) map[string]any {
	a.t.Helper()
	r := a.reply(reqID)
	if !r.OK {
		a.t.Fatalf("reply to %s failed: %v", reqID, r.Error)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		a.t.Fatalf("reply data %s: %v", r.Data, err)
	}
	return m
}

func (a *testApp) failReply(reqID, code string) *Error {
	a.t.Helper()
	r := a.reply(reqID)
	if r.OK || r.Error == nil || r.Error.Code != code {
		a.t.Fatalf("reply to %s: got ok=%v error=%v, want %s", reqID, r.OK, r.Error, code)
	}
	return r.Error
}

func (a *testApp) errorFrame(code, reqID string) *frame.ErrorFrame {
	a.t.Helper()
	d := a.next()
	e, ok := d.(*frame.ErrorFrame)
	if !ok || e.Code != code || e.ReqID != reqID {
		a.t.Fatalf("want error frame %s for %q, got %#v", code, reqID, d)
	}
	return e
}

func (a *testApp) event(reqID string) json.RawMessage {
	a.t.Helper()
	d := a.next()
	e, ok := d.(*frame.Event)
	if !ok || e.ReqID != reqID {
		a.t.Fatalf("want event for %s, got %#v", reqID, d)
	}
	return e.Event
}

// grant answers the app's consent prompt with allow.
func (h *harness) grant(a *testApp) {
	h.t.Helper()
	id := a.request(policy.MethodSessionOpen, nil)
	ap := h.events.nextApproval(h.t)
	if err := h.m.Approve(ap.ApprovalID, policy.Allow, false); err != nil {
		h.t.Fatal(err)
	}
	if got := h.events.nextApproval(h.t); got.State != ApprovalAllowed {
		h.t.Fatalf("settled %+v", got)
	}
	a.okReply(id)
}

// open opens a context (consent must be settled) and returns its id.
func (a *testApp) open(args any) string {
	a.t.Helper()
	id := a.request(policy.MethodSessionOpen, args)
	return a.okReply(id)["context_id"].(string)
}

// relayKernel attaches a kernel that is also the tool relay, as the
// control socket's kernel connection is; the test detaches it.
func (h *harness) relayKernel() (toolKernel, *KernelSession) {
	h.t.Helper()
	k := toolKernel{newFakeKernel(), &RecordingToolRelay{}}
	ks, err := h.m.AttachKernel(k, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return k, ks
}

// kernel attaches a fake kernel for the rest of the test.
func (h *harness) kernel() (*fakeKernel, *KernelSession) {
	h.t.Helper()
	k := newFakeKernel()
	ks, err := h.m.AttachKernel(k, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(ks.Detach)
	return k, ks
}

// until polls cond: only for states no event announces.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// detach is Manager.Detach, then waits for the link's teardown (Detach
// itself does not), so that a test can look at what teardown did.
func (h *harness) detach(app string) {
	h.t.Helper()
	detachWait(h.t, h.m, app)
}

func detachWait(t testing.TB, m *Manager, app string) {
	t.Helper()
	m.mu.Lock()
	l := m.currentLink(app)
	m.mu.Unlock()
	m.Detach(app)
	if l == nil {
		return
	}
	select {
	case <-l.done:
	case <-time.After(wait):
		t.Fatalf("link of %s not torn down", app)
	}
}
