package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"octosup/internal/linewriter"
	"octosup/peer/internal/frame"
)

// link is one process's hub. Its reader handles one line at a time, so
// the socket slows an app that writes faster than the daemon handles; its
// writer drains a bounded queue, so an app that does not read is
// disconnected rather than growing the daemon.
type link struct {
	m     *Manager
	p     *peer
	appID string
	conn  net.Conn
	w     *linewriter.Writer
	// prev is the link this one replaced: its teardown ends before this
	// link handles a line.
	prev *link
	// slots holds a token per open request (and per request read, not yet
	// handled): when full the reader stops, and the socket slows the app.
	slots   chan struct{}
	unasked *rate.Limiter // Config.UnaskedRate; the reader's alone

	// Guarded by the peer's mu.
	spare    bool // the handled request's token is not yet taken by a request
	opening  int  // session.open requests at the store
	requests map[string]*request
	contexts map[string]*appContext // those this process opened
	calls    map[string]*call       // outstanding

	closeOnce sync.Once
	closing   chan struct{} // closed by shut
	reason    string        // set once, before closing is closed
	wrote     chan struct{} // the writer ended
	done      chan struct{} // torn down
}

func newLink(m *Manager, p *peer, conn net.Conn, prev *link) *link {
	l := &link{
		m: m, p: p, appID: p.id, conn: conn, prev: prev,
		slots: make(chan struct{}, m.cfg.MaxOpenRequests),
		// Its burst takes the longest line at once.
		unasked:  rate.NewLimiter(rate.Limit(m.cfg.UnaskedRate), max(m.cfg.UnaskedRate/2, frame.MaxFrame+1+unaskedLineCost)),
		requests: map[string]*request{},
		contexts: map[string]*appContext{},
		calls:    map[string]*call{},
		closing:  make(chan struct{}),
		wrote:    make(chan struct{}),
		done:     make(chan struct{}),
	}
	l.w = linewriter.New(conn, linewriter.Config{
		WriteTimeout: m.cfg.WriteTimeout,
		MaxLines:     m.cfg.QueueFrames, MaxBytes: m.cfg.QueueBytes,
		SoftLines: m.pushFrames, SoftBytes: m.pushBytes,
		OnFail: l.failed,
	})
	return l
}

func (l *link) failed(f *linewriter.Failure) {
	reason := "hub write failed: " + f.Err.Error()
	switch {
	case f.Overflow:
		reason = fmt.Sprintf("app is not reading its hub: %d frames (%d bytes) queued for it, and the next %d bytes would pass its bound of %d frames / %d bytes",
			f.Lines, f.Bytes, f.Next, l.m.cfg.QueueFrames, l.m.cfg.QueueBytes)
		l.m.log.Warn("disconnecting app", zap.String("app", l.appID), zap.String("reason", reason))
	case f.Timeout:
		reason = fmt.Sprintf("app did not read its hub for %s", l.m.cfg.WriteTimeout)
	}
	l.shut(reason)
}

func (l *link) writeLoop() {
	defer close(l.wrote)
	l.w.Run()
}

// shut closes the hub; the reader then tears the link down. The first
// reason wins.
func (l *link) shut(reason string) {
	l.closeOnce.Do(func() {
		l.reason = reason
		close(l.closing)
		l.w.Abort() // nothing more is written: the hub is gone
		l.conn.Close()
	})
}

func (l *link) isShut() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// write queues a line. push (from outside the link: a kernel's event or
// call, app.send) is refused ErrQueueFull, the link staying up, once the
// queue holds pushFrames or pushBytes; the rest is kept for what the
// daemon owes, never refused (a full queue disconnects the app). now, for
// a frame awaited on a quiet link, has an idle writer's putter write it
// without blocking, saving the writer's wake-up. A shut link is
// ErrNotConnected.
func (l *link) write(line []byte, now, push bool) error {
	err := l.w.Put(line, linewriter.Opt{Now: now, Soft: push})
	if err == nil {
		return nil // before errors.As, whose target allocates
	}
	var full *linewriter.Full
	if errors.As(err, &full) {
		return refuse(ErrQueueFull, "the app is not reading its hub: %d frames (%d bytes) are queued for it, and frames from outside the link may fill %d frames / %d bytes; try again once it reads",
			full.Lines, full.Bytes, l.m.pushFrames, l.m.pushBytes)
	}
	return ErrNotConnected // shut, or just failed (failed says why)
}

// sendFrame queues a frame the daemon owes the app.
func (l *link) sendFrame(f frame.Down) { l.send(f, false, false) }

// send encodes a down frame and writes it. One over MaxFrame (which the
// app would refuse) is logged: a reply becomes an internal error reply,
// anything else is dropped, ErrInvalid (callers passing outside data check
// its size first).
func (l *link) send(f frame.Down, now, push bool) error {
	b, err := frame.EncodeDown(f)
	if err == nil && len(b)-1 > frame.MaxFrame {
		err = fmt.Errorf("%T frame of %d bytes is over the %d-byte cap", f, len(b)-1, frame.MaxFrame)
	}
	if err != nil {
		// A bug (only daemon-made values reach here), but the app must not
		// be left waiting on a reply.
		l.m.log.Error("encode down frame", zap.String("app", l.appID), zap.Error(err))
		r, ok := f.(*frame.Reply)
		if !ok {
			return refuse(ErrInvalid, "the frame does not encode")
		}
		b, _ = frame.EncodeDown(&frame.Reply{ReqID: r.ReqID, Error: frame.Errorf(frame.CodeInternal, "the daemon could not encode this reply")})
	}
	return l.write(b, now, push)
}

// open registers r as an open request of the link; it takes the handled
// request's spare token (slots) until it is done.
func (l *link) open(r *request) {
	l.requests[r.id] = r
	if !r.slot && l.spare {
		r.slot, l.spare = true, false
	}
}

func (l *link) readLoop() {
	if l.prev != nil {
		<-l.prev.done
		l.prev = nil
	}
	r := frame.NewReader(l.conn, frame.MaxFrame)
	for {
		line, err := r.Next()
		if errors.Is(err, frame.ErrFrameTooLong) {
			l.badFrame(fmt.Sprintf("line over %d bytes: discarded up to its newline", frame.MaxFrame), "")
			l.pace(frame.MaxFrame + 1)
			continue
		}
		if err != nil {
			reason := "hub read failed: " + err.Error()
			if err == io.EOF {
				reason = "the app closed its hub"
			}
			l.shut(reason)
			break
		}
		if cost := l.handleLine(line); cost > 0 {
			l.pace(cost)
		}
	}
	<-l.wrote
	l.p.run(func() { l.p.teardown(l) })
	close(l.done)
}

// badFrame sends the app a bad_frame error frame in a step.
func (l *link) badFrame(msg, reqID string) {
	l.p.run(func() { l.sendFrame(&frame.ErrorFrame{Code: frame.CodeBadFrame, Message: msg, ReqID: reqID}) })
}

// unaskedLineCost is what handling a line costs beyond its bytes
// (Config.UnaskedRate).
const unaskedLineCost = 2 << 10

// pace waits until the unasked budget has room for a line that costs n
// bytes, or the link closes.
func (l *link) pace(n int) {
	d := l.unasked.ReserveN(time.Now(), n+unaskedLineCost).Delay()
	if d == 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.closing:
	}
}

// handleLine decodes a line and handles it in a step of the peer, so the
// reader never runs ahead of it. cost is what pacing charges for it:
// nothing for a line the daemon waited for (an awaited tool result) or
// keeps open on the kernel or the person, the line's bytes (and more for
// store work) for any other.
func (l *link) handleLine(line []byte) (cost int) {
	n := len(line) + 1
	up, pass, err := frame.ParseLine(line)
	switch {
	case err != nil:
		var fe *frame.FrameError
		errors.As(err, &fe)
		l.badFrame(fe.Reason, fe.ReqID)
	case pass && frame.RelayedLen(line) > relayRoom:
		l.badFrame(fmt.Sprintf("a pass-through frame of %d bytes would take %d on the control socket (each <, > and & written as \\u003c), past the %d a relayed value may: send less",
			len(line), frame.RelayedLen(line), relayRoom), "")
	case pass:
		frame := json.RawMessage(bytes.Clone(line))
		l.p.run(func() { l.m.cfg.Events.AppFrame(l.appID, frame) })
	default:
		switch f := up.(type) {
		case *frame.Request:
			// With MaxOpenRequests open, the next request waits in the socket.
			select {
			case l.slots <- struct{}{}:
			case <-l.closing:
				return 0
			}
			l.p.run(func() { cost = l.p.onRequestLine(l, f, n) })
			return cost
		case *frame.ToolResult:
			sent := false
			l.p.run(func() { sent = l.p.onToolResult(l, f) })
			if sent {
				return 0
			}
		}
	}
	return n
}
