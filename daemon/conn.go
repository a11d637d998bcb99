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

// Conn is one client connection, handed to each handler. Its answers and
// events reach the socket through w in the order they were queued.
type Conn struct {
	srv    *Server
	nc     net.Conn
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc
	w      *linewriter.Writer

	dropOnce sync.Once

	subMu sync.Mutex
	sub   *stream // the subscribe op's stream

	// kernel is kernel.attach's session: the connection owns it, and
	// serveConn detaches it however the connection ends.
	kernel atomic.Pointer[peer.KernelSession]
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

// failed drops a connection whose writer failed: a client that does not
// read is cut off, never waited for.
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

// event queues an encoded event without blocking, reporting whether it
// was; a connection over its bounds is dropped. line goes to many
// connections: it is never changed.
func (c *Conn) event(line []byte) bool {
	return c.w.Put(line, linewriter.Opt{Now: true}) == nil
}

// drop closes a connection that cannot keep up; serveConn's teardown
// follows from the failed read.
func (c *Conn) drop(why string) {
	c.dropOnce.Do(func() {
		c.log.Warn("drop control connection", zap.String("why", why))
		c.cancel()
		c.nc.Close()
	})
}
