package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// stallListener hands out the next connection accepted after arm as a
// client that never reads: the daemon's writes to it never complete (a
// blocking write waits until the test ends; a non-blocking one takes
// nothing), with nothing of the kernel's socket buffer in between, so
// the number of answers that fill its queue is exact.
type stallListener struct {
	net.Listener
	mu    sync.Mutex
	armed bool
	gone  chan struct{} // closed at the test's end: the stalled writes return
}

func (l *stallListener) arm() {
	l.mu.Lock()
	l.armed = true
	l.mu.Unlock()
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || !l.armed {
		return c, err
	}
	l.armed = false
	return &stalledConn{Conn: c, gone: l.gone}, nil
}

type stalledConn struct {
	net.Conn
	gone chan struct{}
}

func (c *stalledConn) Write(b []byte) (int, error) {
	<-c.gone
	return 0, net.ErrClosed
}

// SyscallConn keeps the peer checks (SO_PEERCRED, SO_PEERPIDFD) working;
// its Write, the writer's direct write, takes nothing.
func (c *stalledConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.Conn.(syscall.Conn).SyscallConn()
	return stalledRaw{rc}, err
}

type stalledRaw struct{ syscall.RawConn }

func (stalledRaw) Write(func(uintptr) bool) error { return nil }

// TestUnreadKernelHoldsUpNothing is issue 25's defect 3 on the daemon:
// a same-user client pipelines requests without reading, then attaches
// as the kernel. Its kernel.attach's answer finds its write queue full:
// the answer is queued in the step that attaches the kernel, which never
// waits, so the connection is dropped and the kernel detached at once.
// Meanwhile, and after, status, the watchdog's ping of the peer links
// and the app's own hub traffic answer at once. (Before, the answer
// waited for room for up to 10 s, and the peer side's shared feed with
// it.)
func TestUnreadKernelHoldsUpNothing(t *testing.T) {
	sl := &stallListener{gone: make(chan struct{})}
	rig := newToolRigIn(t, t.TempDir(), nil, func(ln net.Listener) net.Listener { sl.Listener = ln; return sl })
	t.Cleanup(func() { close(sl.gone) })

	sl.arm()
	k := dialRaw(t, rig.ts.path)
	// Every line below is answered on the connection's reader, in
	// order (a request without an op is refused there, and kernel.attach
	// is an ordered op): connQueue refusals fill the queue (the first
	// taken by the writer's loop, blocked in its write), and
	// kernel.attach's answer finds no room.
	var b strings.Builder
	for i := range connQueue {
		fmt.Fprintf(&b, `{"id":%d}`+"\n", i+10)
	}
	b.WriteString(`{"id":1,"op":"` + opTestAttach + `"}` + "\n")
	if _, err := k.nc.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	// Dropped: the client reads the end of its connection, and nothing
	// of it (no daemon write to it ever completed).
	k.nc.SetReadDeadline(time.Now().Add(5 * time.Second)) // below the 10 s write timeout
	if n, err := k.r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the unread kernel's connection: read %d bytes, %v; want its end", n, err)
	}

	// Each of these answers within a bound far below the 10 s for
	// which the attach's answer used to wait.
	const bound = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var st control.StatusData
	if err := rig.ts.client.Do(ctx, control.OpStatus, nil, &st); err != nil || len(st.Apps) != 1 {
		t.Fatalf("status after an unread kernel: %v %+v", err, st)
	}
	if err := rig.m.Ping(ctx); err != nil {
		t.Fatalf("the peer links' ping after an unread kernel: %v", err)
	}
	rig.appWrite(&hubRequest{ReqID: "o2", Method: policy.MethodSessionOpen})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if rp := rig.appNext(); rp.Type != "reply" || rp.ReqID != "o2" || !rp.OK {
			t.Errorf("session.open after an unread kernel: the app got %+v", rp)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the app's session.open was not answered after an unread kernel")
	}
}

// TestAFullRelayBacklogReachesTheNextKernel: the outcomes kept while no
// kernel was attached, as many as the peer side keeps
// (peer.DefaultRelayQueue), all reach the next kernel right after its
// attach's answer, queued in one step: they fit its connection's queue
// (connQueue), which held a quarter of them before and dropped the kernel
// with them.
func TestAFullRelayBacklogReachesTheNextKernel(t *testing.T) {
	rig := newToolRig(t)
	defer rig.echo()()
	calls := peer.DefaultRelayQueue / 2 // an acknowledgement and an outcome each
	rig.callsWithoutKernel(calls)
	k := rig.kernel()
	k.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	finished := 0
	for range 2 * calls {
		var ev struct {
			Event string `json:"event"`
		}
		if b := k.line(); json.Unmarshal(b, &ev) != nil || (ev.Event != control.EventToolAcknowledged && ev.Event != control.EventToolFinished) {
			t.Fatalf("after %d outcomes: %s", finished, b)
		}
		if ev.Event == control.EventToolFinished {
			finished++
		}
	}
	if finished != calls {
		t.Fatalf("the kernel got %d outcomes of %d", finished, calls)
	}
}

// TestABigRelayBacklogKeepsTheKernel: outcomes kept while no kernel was
// attached are bounded in bytes too, below what a connection holds, so
// that large ones (400 of 64 KiB here, 25 MiB, 150 MiB as the kernel's
// lines write them) do not drop the next
// kernel with them: the oldest are dropped (and logged) instead, the
// kernel gets the rest right after its attach's answer, and its
// connection serves on.
func TestABigRelayBacklogKeepsTheKernel(t *testing.T) {
	rig := newToolRig(t)
	rig.hub.SetReadDeadline(time.Time{})
	// 64 KiB of '<', written as they are: the kernel's line has each
	// as \u003c, 384 KiB, and the bound must count those.
	blob := strings.Repeat("<", 64<<10)
	go func() { // the app: every call answered with 64 KiB
		for {
			line, err := rig.r.ReadBytes('\n')
			if err != nil {
				return
			}
			var f struct {
				Peer struct {
					Type   string `json:"type"`
					CallID string `json:"call_id"`
				} `json:"octos_peer"`
			}
			if json.Unmarshal(line, &f) != nil || f.Peer.Type != "tool_call" {
				continue
			}
			b := `{"octos_peer":{"type":"tool_result","call_id":"` + f.Peer.CallID + `","ok":true,"data":{"blob":"` + blob + `"}}}` + "\n"
			if _, err := rig.hub.Write([]byte(b)); err != nil {
				return
			}
		}
	}()
	const calls = 400
	rig.callsWithoutKernel(calls)
	k := rig.kernel()
	k.send(fmt.Sprintf(`{"id":2,"op":"tool.call","args":{"app":"notes","call":{"call_id":"after","name":"notes.search","args":{"query":"x"},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"test"}}}`, rig.ctx))
	k.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	kept := 0
	for {
		b, err := k.r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("the kernel's connection ended after %d kept outcomes: %v", kept, err)
		}
		var ev struct {
			Event  string `json:"event"`
			CallID string `json:"call_id"`
		}
		json.Unmarshal(b, &ev)
		if ev.Event == control.EventToolFinished && ev.CallID == "after" {
			break
		}
		if ev.Event == control.EventToolFinished {
			kept++
		}
	}
	if kept == 0 || kept == calls {
		t.Fatalf("the kernel got %d of %d kept outcomes: want the newest that fit, not none and not all", kept, calls)
	}
}

// callsWithoutKernel has the rig's app answer n calls made by a kernel
// that is not a ToolRelay (attached in process, and detached at the
// end), as many at once as the app may hold, and returns once every one
// has its outcome: kept for the next kernel.
func (r *toolRig) callsWithoutKernel(n int) {
	r.t.Helper()
	ks, err := r.m.AttachKernel(deafKernel{}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	defer ks.Detach()
	deadline := time.Now().Add(30 * time.Second)
	settle := func(most int) { // at most most calls outstanding
		for r.m.LinkStatus("notes").OutstandingCalls > most {
			if time.Now().After(deadline) {
				r.t.Fatal("the app did not answer the calls")
			}
			runtime.Gosched()
		}
	}
	for i := range n {
		settle(peer.DefaultMaxCalls - 1)
		if err := ks.ToolCall("notes", control.ToolCall{CallID: fmt.Sprintf("b%d", i), Name: "notes.search",
			Args: json.RawMessage(`{"query":"x"}`), Risk: control.RiskRead, Confirm: control.ConfirmNone,
			TimeoutMS: 30000, ContextID: r.ctx, Caller: "test"}, nil); err != nil {
			r.t.Fatalf("call %d: %v", i, err)
		}
	}
	settle(0)
}

// deafKernel is a kernel that takes no request and hears no outcome (it
// is not a ToolRelay).
type deafKernel struct{}

func (deafKernel) Request(peer.KernelRequest) error {
	return errors.New("this kernel takes no request")
}
func (deafKernel) ContextClosed(app, contextID, reason string) {}
