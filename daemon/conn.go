package daemon

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"octosup/internal/linewriter"
	"octosup/peer"
)

// Conn is one client connection, handed to each handler. Its lines
// (answers and events) go through one write queue, w: they reach the
// socket in the order they were queued.
type Conn struct {
	srv    *Server
	nc     net.Conn
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc
	w      *linewriter.Writer

	dropOnce sync.Once

	// subMu guards sub, the subscribe op's stream once subscribed.
	subMu sync.Mutex
	sub   *stream

	// kernel is the session of kernel.attach, until the connection ends.
	kernel atomic.Pointer[peer.KernelSession]

	// hookMu guards hooks, onClose's, run at teardown.
	hookMu sync.Mutex
	hooks  []func()
}

func newConn(ctx context.Context, cancel context.CancelFunc, s *Server, nc net.Conn, log *zap.Logger) *Conn {
	c := &Conn{srv: s, nc: nc, log: log, ctx: ctx, cancel: cancel}
	c.w = linewriter.New(nc, linewriter.Config{
		WriteTimeout: writeTimeout,
		MaxLines:     connQueue,
		MaxBytes:     connQueueBytes,
		OnFail:       c.failed,
	})
	return c
}

// failed drops a connection whose writer failed: a subscriber that does
// not read is cut off, never waited for.
func (c *Conn) failed(f *linewriter.Failure) {
	switch {
	case f.Overflow:
		c.drop(fmt.Sprintf("slow reader: %d lines (%d bytes) not read", f.Lines, f.Bytes))
	case f.Timeout:
		c.drop(fmt.Sprintf("client did not read for %s", writeTimeout))
	default:
		c.drop(f.Error())
	}
}

// onClose runs f when the connection ends, after its last request was
// answered and before Serve returns: a handler's way to own what the
// connection started (an attached kernel) without a goroutine of its own.
func (c *Conn) onClose(f func()) {
	c.hookMu.Lock()
	defer c.hookMu.Unlock()
	c.hooks = append(c.hooks, f)
}

// runCloseHooks runs the onClose hooks, once no handler runs any more
// (so that no hook can be added now): each runs exactly once, before the
// connection is gone for good.
func (c *Conn) runCloseHooks() {
	c.hookMu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.hookMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// event queues an encoded event line without blocking; a connection over
// its bounds is dropped (the writer fails). line is kept until written
// and never changed (a published line goes to many). It reports whether
// the line was queued.
func (c *Conn) event(line []byte) bool {
	return c.w.Put(line, linewriter.Opt{Now: true}) == nil
}

// drop closes a connection that cannot keep up. The teardown in
// serveConn follows from the failed read.
func (c *Conn) drop(why string) {
	c.dropOnce.Do(func() {
		c.log.Warn("drop control connection", zap.String("why", why))
		c.cancel()
		c.nc.Close()
	})
}
