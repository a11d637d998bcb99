package trywrite

import (
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"

	"octosup/internal/roundtrip"
)

func raw(t *testing.T, c net.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestWrite: what the socket takes goes at once; a full socket takes
// nothing and is no error; a passed deadline takes nothing and is no
// error; a peer gone is an error.
func TestWrite(t *testing.T) {
	send, recv := roundtrip.TightPair(t, 4096)
	rc := raw(t, send)
	if n, err := Write(rc, [][]byte{[]byte("hel"), []byte("lo\n")}); n != 6 || err != nil {
		t.Fatalf("Write to an empty socket: %d, %v", n, err)
	}
	got := make([]byte, 6)
	if _, err := recv.Read(got); err != nil || string(got) != "hello\n" {
		t.Fatalf("read %q, %v", got, err)
	}

	big := bytes.Repeat([]byte("x"), 1<<20)
	total := 0
	for {
		n, err := Write(rc, [][]byte{big})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break // full: nothing taken, no error, no wait
		}
		total += n
		if total > 64<<20 {
			t.Fatal("the socket never filled")
		}
	}
	if total == 0 || total >= len(big)*64 {
		t.Fatalf("took %d bytes before filling", total)
	}

	send.SetWriteDeadline(time.Now().Add(-time.Second))
	if n, err := Write(rc, [][]byte{[]byte("late\n")}); n != 0 || err != nil {
		t.Fatalf("Write past the deadline: %d, %v; want 0, nil", n, err)
	}

	recv.Close()
	send.SetWriteDeadline(time.Time{})
	if _, err := Write(rc, [][]byte{[]byte("gone\n")}); err == nil {
		t.Fatal("Write to a closed peer: no error")
	}
}

// TestWriteMoreBuffersThanIOVMax: more buffers than one writev takes
// (IOV_MAX) write the first ones, not fail EINVAL (a control connection
// corked while a kernel's backlog is queued hands over thousands).
func TestWriteMoreBuffersThanIOVMax(t *testing.T) {
	send, _ := roundtrip.TightPair(t, 1<<20)
	bufs := make([][]byte, 3000)
	for i := range bufs {
		bufs[i] = []byte("x\n")
	}
	n, err := Write(raw(t, send), bufs)
	if err != nil || n != 2*maxIOV {
		t.Fatalf("Write of %d buffers: %d bytes, %v; want the first %d buffers' %d bytes", len(bufs), n, err, maxIOV, 2*maxIOV)
	}
}
