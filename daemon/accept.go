package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/supervisor"
)

// Serve accepts connections on ln until ctx is done, then closes ln,
// ends every connection and returns. It also forwards the supervisor's
// events to subscribers. Call it once per Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	// Subscribed before the first accept: a client's logs -f or
	// subscribe misses no event of the daemon's lifetime.
	first := s.cfg.Apps.Subscribe(supervisorBuffer)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.forward(ctx, first)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		ln.Close()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retryAccept(err) {
				// Out of descriptors, or a peer gone before accept: the
				// daemon goes on and tries again shortly.
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
		// The peer had connected by now: a process at its pid that
		// started later is another one.
		accepted := boottime()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, nc, accepted)
		}()
	}
}

func retryAccept(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// forward publishes the supervisor's events. When the supervisor drops
// this subscription (it fell behind), it subscribes again and publishes
// every app's current state, so that subscribers converge.
func (s *Server) forward(ctx context.Context, sub Subscription) {
	// An answer waiting for its event must not wait for events that
	// will not come.
	defer s.published.end()
	for ctx.Err() == nil {
		if sub == nil {
			sub = s.cfg.Apps.Subscribe(supervisorBuffer)
		}
		s.pump(ctx, sub)
		sub.Close()
		if ctx.Err() != nil {
			return
		}
		err := sub.Err()
		sub = nil
		if !errors.Is(err, supervisor.ErrSlowSubscriber) {
			// The supervisor shut down: nothing more to forward.
			s.log.Debug("supervisor events ended", zap.Error(err))
			return
		}
		s.log.Warn("fell behind the supervisor's events; resynchronizing subscribers")
		if all, err := s.cfg.Apps.Status(""); err == nil {
			for _, st := range all {
				s.publish(control.TopicState, stateEvent(st))
				s.published.note(st.ID, st.Seq)
			}
		}
	}
}

func (s *Server) pump(ctx context.Context, sub Subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			switch {
			case ev.Kind == supervisor.KindState && ev.State != nil:
				s.publish(control.TopicState, stateEvent(*ev.State))
				s.published.note(ev.State.ID, ev.State.Seq)
			case ev.Kind == supervisor.KindLog && ev.Log != nil:
				s.publishSeq(control.TopicLog, logLine(*ev.Log), ev.Log.Seq)
			case ev.Kind == supervisor.KindWarning && ev.State != nil:
				// On the state topic, which the shell and watch follow:
				// the app's state, with what it ran into.
				se := stateEvent(*ev.State)
				se.Warning = ev.Warning
				s.publish(control.TopicState, se)
			}
		}
	}
}

// serveConn runs one connection: the peer check, then the reader (this
// goroutine), one goroutine per request in flight and the writer's loop.
func (s *Server) serveConn(ctx context.Context, nc net.Conn, accepted time.Duration) {
	log, p, ok := s.admit(nc, accepted)
	if !ok {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	c := newConn(cctx, cancel, s, nc, p, log)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		c.w.Run()
	}()
	// The server's shutdown ends the read.
	stop := context.AfterFunc(ctx, func() { nc.Close() })

	var inflight sync.WaitGroup
	c.readLoop(cctx, &inflight)
	inflight.Wait() // every request read gets its answer queued
	stop()
	s.fanout.removeConn(c)
	cancel()
	c.runCloseHooks()
	c.w.Close() // what is queued is written, then the loop returns
	writer.Wait()
	nc.Close()
}

// refusedLine is the one line a refused peer gets.
func refusedLine(why string) []byte {
	line, _ := json.Marshal(control.Response{Error: control.Errorf(control.CodeNotPermitted, "%s", why)})
	return append(line, '\n')
}
