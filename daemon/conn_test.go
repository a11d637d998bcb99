package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"testing"

	"go.uber.org/zap"
)

// TestConnEventBudget: a connection's unwritten events are bounded in
// bytes, not only in lines: big events that pile up drop it long before
// connQueue lines of them would.
func TestConnEventBudget(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Conn{nc: a, log: zap.NewNop(), ctx: ctx, cancel: cancel,
		out: make(chan []byte, connQueue), quit: make(chan struct{})}
	line := bytes.Repeat([]byte("x"), 1<<20) // nobody writes them out
	sent := 0
	for range connQueue {
		if !c.sendEvent(line) {
			break
		}
		sent++
	}
	if sent*len(line) > connQueueBytes {
		t.Fatalf("queued %d events of %d bytes, over the %d-byte budget", sent, len(line), connQueueBytes)
	}
	select {
	case <-c.ctx.Done():
	default:
		t.Fatal("the connection over its budget was not dropped")
	}
}

// TestConnCloseHooks: hooks run once the connection ends, in order.
func TestConnCloseHooks(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	ran := make(chan int, 2)
	ts.srv.Handle("test.hook", func(_ context.Context, c *Conn, _ json.RawMessage) (any, error) {
		c.OnClose(func() { ran <- 1 })
		c.OnClose(func() { ran <- 2 })
		return nil, nil
	})
	c := dialRaw(t, ts.path)
	c.send(`{"id":1,"op":"test.hook"}`)
	if resp := c.response(); !resp.OK {
		t.Fatalf("%+v", resp.Error)
	}
	select {
	case n := <-ran:
		t.Fatalf("hook %d ran while the connection is open", n)
	default:
	}
	c.nc.Close()
	if a, b := <-ran, <-ran; a != 1 || b != 2 {
		t.Fatalf("hooks ran %d, %d", a, b)
	}
}
