package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Serve accepts connections on ln until ctx is done, then closes ln,
// ends every connection and returns. Call it once per Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	wg.Go(func() {
		<-ctx.Done()
		ln.Close()
	})
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retryAccept(err) { // e.g. out of descriptors: try again shortly
				s.log.Warn("accept on control socket", zap.Error(err))
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			cancel()
			return fmt.Errorf("accept on control socket: %w", err)
		}
		accepted := boottime() // a process at the peer's pid started later is another
		wg.Go(func() { s.serveConn(ctx, nc, accepted) })
	}
}

func retryAccept(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return (ok && ne.Timeout()) ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// serveConn runs one connection: the peer check, then the reader (this
// goroutine), a goroutine per request in flight and the writer's loop.
func (s *Server) serveConn(ctx context.Context, nc net.Conn, accepted time.Duration) {
	log, ok := s.admit(nc, accepted)
	if !ok {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	c := newConn(cctx, cancel, s, nc, log)
	var writer sync.WaitGroup
	writer.Go(c.w.Run)
	stop := context.AfterFunc(ctx, func() { nc.Close() }) // shutdown ends the read

	var inflight sync.WaitGroup
	c.readLoop(cctx, &inflight)
	inflight.Wait() // every handler has returned
	stop()
	s.fanout.removeConn(c)
	cancel()
	// No handler runs now: a kernel it attached is detached (the apps'
	// open turns fail) before the last lines are written.
	if ks := c.kernel.Swap(nil); ks != nil {
		ks.Detach()
	}
	c.w.Close() // what is queued is written, then the loop returns
	writer.Wait()
	nc.Close()
}
