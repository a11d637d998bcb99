package linewriter

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"octosup/internal/roundtrip"
)

func start(t *testing.T, conn net.Conn, cfg Config) *Writer {
	t.Helper()
	w := New(conn, cfg)
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	t.Cleanup(func() { w.Abort(); conn.Close(); <-done })
	return w
}

// TestOrderUnderConcurrentPuts: lines of many senders, direct and queued,
// reach the socket whole and each sender's in its order.
func TestOrderUnderConcurrentPuts(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	w := start(t, send, Config{MaxLines: 1 << 20})
	const senders, each = 8, 2000
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				line := fmt.Sprintf("%d %d %s", s, i, strings.Repeat("x", i%300))
				if err := w.Put([]byte(line), Opt{Now: i%2 == 0}); err != nil {
					t.Errorf("put: %v", err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	sc := bufio.NewScanner(recv)
	for got := 0; got < senders*each && sc.Scan(); got++ {
		var s, i int
		var pad string
		if _, err := fmt.Sscanf(sc.Text()+" -", "%d %d %s", &s, &i, &pad); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if want := strings.Repeat("x", i%300); pad != want && !(want == "" && pad == "-") {
			t.Fatalf("line %q is not whole", sc.Text())
		}
		if i != next[s] {
			t.Fatalf("sender %d: line %d came after %d", s, i, next[s]-1)
		}
		next[s]++
	}
	wg.Wait()
	for s, n := range next {
		if n != each {
			t.Errorf("sender %d: %d lines of %d", s, n, each)
		}
	}
}

// hookConn is a socket whose writes run a hook first: once for the next
// direct write (through its RawConn), every time for a write of the loop
// (through Write: the embedded net.Conn, unlike a *net.UnixConn, does
// not let net.Buffers bypass it with a writev of its own).
type hookConn struct {
	net.Conn
	beforeDirect func() // run once, then cleared
	beforeWrite  func()
}

func hook(c net.Conn) *hookConn { return &hookConn{Conn: c} }

func (c *hookConn) Write(b []byte) (int, error) {
	if c.beforeWrite != nil {
		c.beforeWrite()
	}
	return c.Conn.Write(b)
}

func (c *hookConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.Conn.(syscall.Conn).SyscallConn()
	return hookRaw{rc, c}, err
}

type hookRaw struct {
	syscall.RawConn
	c *hookConn
}

func (r hookRaw) Write(f func(uintptr) bool) error {
	if h := r.c.beforeDirect; h != nil {
		r.c.beforeDirect = nil
		h()
	}
	return r.RawConn.Write(f)
}

// TestShortDirectWriteKeepsItsPlace: what the socket did not take of a
// direct write goes out before what was put while it wrote.
func TestShortDirectWriteKeepsItsPlace(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	conn := hook(send)
	w := New(conn, Config{})
	big := strings.Repeat("b", 1<<20) // the socket takes a part of it
	conn.beforeDirect = func() {
		if err := w.Put([]byte("after"), Opt{Now: true}); err != nil {
			t.Error(err)
		}
	}
	if err := w.Put([]byte(big), Opt{Now: true}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	t.Cleanup(func() { w.Abort(); send.Close(); <-done })
	sc := bufio.NewScanner(recv)
	sc.Buffer(nil, 2<<20)
	if !sc.Scan() || sc.Text() != big {
		t.Fatalf("the first line is not the big one whole (%d bytes)", len(sc.Text()))
	}
	if !sc.Scan() || sc.Text() != "after" {
		t.Fatalf("read %q, want after", sc.Text())
	}
}

// TestCloseThenAFailedDirectWriteEndsTheLoop: a Close while a direct
// write holds the socket, then that write failing (the peer gone), ends
// Run: nothing is left to write. A daemon's connection teardown waits
// for Run; the loop used to wait for a wake-up that never came (a
// benchmark hung on it, once in a few runs).
func TestCloseThenAFailedDirectWriteEndsTheLoop(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	conn := hook(send)
	w := New(conn, Config{})
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	// The loop runs once with nothing to do, and waits.
	w.Hold()
	w.Release()
	conn.beforeDirect = func() {
		w.Close()
		// Let the loop see the Close while the socket is held.
		for range 100 {
			runtime.Gosched()
		}
		recv.Close()
	}
	if err := w.Put([]byte("gone"), Opt{Now: true}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a direct write to a closed peer: %v, want ErrClosed", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close and a failed direct write")
	}
}

// TestNoLockAcrossAWrite: with the loop blocked in a write to a peer that
// does not read, every other method still returns.
func TestNoLockAcrossAWrite(t *testing.T) {
	send, _ := roundtrip.TightPair(t, 4096)
	taken := make(chan struct{}, 1)
	conn := hook(send)
	conn.beforeWrite = func() {
		select {
		case taken <- struct{}{}:
		default:
		}
	}
	w := New(conn, Config{})
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	t.Cleanup(func() { w.Abort(); send.Close(); <-done })
	big := []byte(strings.Repeat("y", 1<<20)) // far more than the socket holds
	if err := w.Put(big, Opt{}); err != nil {
		t.Fatal(err)
	}
	<-taken // the loop now blocks writing it
	for i := range 100 {
		if err := w.Put([]byte(fmt.Sprint(i)), Opt{Now: true}); err != nil {
			t.Fatal(err)
		}
	}
	w.Hold()
	w.Release()
	if l, _ := w.Queued(); l != 101 {
		t.Fatalf("Queued = %d lines, want 101", l)
	}
	w.Close() // and Close does not wait for the blocked write either
}

func TestBounds(t *testing.T) {
	t.Run("soft is refused and the writer stays", func(t *testing.T) {
		send, recv := roundtrip.TightPair(t, 4096)
		w := New(send, Config{MaxLines: 4, SoftLines: 2, OnFail: func(f *Failure) { t.Errorf("failed: %v", f) }})
		for range 2 {
			if err := w.Put([]byte("a"), Opt{Soft: true}); err != nil {
				t.Fatal(err)
			}
		}
		err := w.Put([]byte("a"), Opt{Soft: true})
		var full *Full
		if !errors.Is(err, ErrFull) || !errors.As(err, &full) || full.Lines != 2 {
			t.Fatalf("third soft put: %v, want a *Full of 2 lines", err)
		}
		if err := w.Put([]byte("owed"), Opt{}); err != nil {
			t.Fatalf("a put within the hard bound: %v", err)
		}
		go w.Run()
		w.Close()
		sc := bufio.NewScanner(recv)
		var got []string
		for sc.Scan() {
			got = append(got, sc.Text())
			if len(got) == 3 {
				break
			}
		}
		if strings.Join(got, ",") != "a,a,owed" {
			t.Fatalf("read %q", got)
		}
	})
	t.Run("hard fails the writer once", func(t *testing.T) {
		send, _ := roundtrip.TightPair(t, 4096)
		fails := make(chan *Failure, 2)
		w := New(send, Config{MaxLines: 2, OnFail: func(f *Failure) { fails <- f }})
		w.Put([]byte("a"), Opt{})
		w.Put([]byte("b"), Opt{})
		if err := w.Put([]byte("c"), Opt{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("put past the hard bound: %v, want ErrClosed", err)
		}
		if err := w.Put([]byte("d"), Opt{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("put after the failure: %v", err)
		}
		f := <-fails
		if !f.Overflow || f.Lines != 2 || f.Next != 2 {
			t.Fatalf("failure %+v", f)
		}
		w.Run() // returns at once: the writer failed
		if len(fails) != 0 {
			t.Fatal("OnFail called twice")
		}
	})
	t.Run("wait waits for room", func(t *testing.T) {
		send, recv := roundtrip.TightPair(t, 4096)
		w := start(t, send, Config{MaxLines: 1, MaxBytes: 1 << 20})
		w.Hold() // the first line stays queued: the bound is reached
		w.Put([]byte("first"), Opt{})
		put := make(chan error)
		go func() { put <- w.Put([]byte("second"), Opt{Wait: make(chan struct{})}) }()
		w.Release() // the first goes out, making room
		if err := <-put; err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(recv)
		for _, want := range []string{"first", "second"} {
			if !sc.Scan() || sc.Text() != want {
				t.Fatalf("read %q, want %q", sc.Text(), want)
			}
		}
	})
	t.Run("wait gives up when told", func(t *testing.T) {
		send, _ := roundtrip.TightPair(t, 4096)
		w := New(send, Config{MaxLines: 1})
		w.Put([]byte("first"), Opt{})
		stop := make(chan struct{})
		close(stop)
		if err := w.Put([]byte("second"), Opt{Wait: stop}); !errors.Is(err, ErrClosed) {
			t.Fatalf("%v, want ErrClosed", err)
		}
	})
}

func TestTimeoutFails(t *testing.T) {
	send, _ := roundtrip.TightPair(t, 4096)
	fails := make(chan *Failure, 1)
	w := New(send, Config{WriteTimeout: 50 * time.Millisecond, OnFail: func(f *Failure) { fails <- f }})
	w.Put([]byte(strings.Repeat("z", 1<<20)), Opt{})
	w.Run() // blocks on the peer that does not read, then fails
	f := <-fails
	if !f.Timeout || !errors.Is(f.Err, os.ErrDeadlineExceeded) {
		t.Fatalf("failure %+v, want a timeout", f)
	}
}

// TestCloseWritesTheRest: Close is a flush, even of what a direct writer
// handed back.
func TestCloseWritesTheRest(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	w := New(send, Config{})
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	want := strings.Repeat("q", 100<<10)
	w.Put([]byte(want), Opt{Now: true})
	w.Put([]byte("last"), Opt{Now: true})
	w.Close()
	if err := w.Put([]byte("late"), Opt{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after Close: %v", err)
	}
	sc := bufio.NewScanner(recv)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != want {
		t.Fatal("the big line did not arrive whole")
	}
	if !sc.Scan() || sc.Text() != "last" {
		t.Fatalf("read %q, want last", sc.Text())
	}
	<-done
}

// TestHoldBatches: what is put under a hold waits for the release.
func TestHoldBatches(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	w := start(t, send, Config{})
	w.Hold()
	for i := range 3 {
		w.Put([]byte(fmt.Sprint(i)), Opt{Now: true})
	}
	if l, _ := w.Queued(); l != 3 {
		t.Fatalf("under a hold %d lines are queued, want 3", l)
	}
	w.Release()
	buf := make([]byte, 64)
	n, err := recv.Read(buf)
	if err != nil || string(buf[:n]) != "0\n1\n2\n" {
		t.Fatalf("first read %q, %v: want the three lines in one write", buf[:n], err)
	}
}
