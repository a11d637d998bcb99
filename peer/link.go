package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// link is one process's hub. Its reader handles one line at a time, so an
// app that writes faster than the daemon handles is slowed by the socket;
// its writer drains a bounded queue, so an app that does not read is
// disconnected rather than growing the daemon.
type link struct {
	m     *Manager
	p     *peer
	appID string
	conn  net.Conn

	out    chan []byte
	queued atomic.Int64 // bytes in out

	// prev is the link this one replaced: its teardown ends before this
	// link handles a line.
	prev *link
	// slots holds one token per open request (and one for the request
	// being read): a full one stops the reader, so the socket slows an
	// app that keeps too many requests open.
	slots chan struct{}
	spare bool // the reader's token is not yet taken by a request (m.mu)
	// opening counts session.open requests at the store (m.mu).
	opening int

	// Guarded by m.mu.
	requests map[string]*request    // open requests, by req_id
	contexts map[string]*appContext // contexts this process opened
	calls    map[string]*call       // outstanding tool calls, by call_id

	closeOnce sync.Once
	closing   chan struct{} // closed by shut
	reason    string        // why, set once before closing is closed
	wrote     chan struct{} // the writer ended
	done      chan struct{} // torn down
}

func newLink(m *Manager, p *peer, conn net.Conn, prev *link) *link {
	return &link{
		m: m, p: p, appID: p.app.ID, conn: conn, prev: prev,
		slots:    make(chan struct{}, m.cfg.MaxOpenRequests),
		out:      make(chan []byte, m.cfg.QueueFrames),
		requests: map[string]*request{},
		contexts: map[string]*appContext{},
		calls:    map[string]*call{},
		closing:  make(chan struct{}),
		wrote:    make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// shut closes the hub; the reader then tears the link down. The first
// reason wins.
func (l *link) shut(reason string) {
	l.closeOnce.Do(func() {
		l.reason = reason
		close(l.closing)
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

// send queues one encoded line. It never blocks: a full queue disconnects
// the app. It reports whether the line was queued.
func (l *link) send(line []byte) bool {
	if l.isShut() {
		return false
	}
	n := int64(len(line))
	if q := l.queued.Load(); q+n > int64(l.m.cfg.QueueBytes) || len(l.out) == cap(l.out) {
		reason := fmt.Sprintf("app is not reading its hub: %d frames (%d bytes) queued for it, and the next %d bytes would pass its bound of %d frames / %d bytes",
			len(l.out), q, n, cap(l.out), l.m.cfg.QueueBytes)
		l.m.log.Warn("disconnecting app", zap.String("app", l.appID), zap.String("reason", reason))
		l.shut(reason)
		return false
	}
	l.queued.Add(n)
	l.out <- line
	return true
}

// sendFrame encodes and queues a down frame. A frame over MaxFrame is
// never written (the app's reader would refuse it): a reply becomes an
// internal error reply, anything else is dropped and logged (the callers
// that pass outside data check its size first).
func (l *link) sendFrame(f Down) bool {
	b, err := EncodeDown(f)
	if err == nil && len(b)-1 > MaxFrame {
		err = fmt.Errorf("%T frame of %d bytes is over the %d-byte cap", f, len(b)-1, MaxFrame)
	}
	if err != nil {
		// Only daemon-made values reach here; a failure is a bug, and the
		// app must still not be left waiting on a reply.
		l.m.log.Error("encode down frame", zap.String("app", l.appID), zap.Error(err))
		if r, ok := f.(*Reply); ok {
			b, _ = EncodeDown(&Reply{ReqID: r.ReqID, Error: errorf(CodeInternal, "the daemon could not encode this reply")})
		} else {
			return false
		}
	}
	return l.send(b)
}

// writeBatch caps the bytes the writer gathers into one write.
const writeBatch = 64 << 10

// writeLoop writes queued frames, gathering whatever is queued at the
// moment into one write: one syscall per burst under load, no added
// latency when idle.
func (l *link) writeLoop() {
	defer close(l.wrote)
	buf := make([]byte, 0, writeBatch)
	// The deadline moves at most every tenth of WriteTimeout, not at
	// every write (moving it is a timer update of its own): every write
	// still has at least nine tenths of it.
	var armedAt time.Time
	for {
		select {
		case <-l.closing:
			return
		case b := <-l.out:
			buf = append(buf[:0], b...)
		gather:
			for len(buf) < writeBatch {
				select {
				case more := <-l.out:
					l.queued.Add(-int64(len(b)))
					b = more
					buf = append(buf, b...)
				default:
					break gather
				}
			}
			l.queued.Add(-int64(len(b)))
			if now := time.Now(); now.Sub(armedAt) >= l.m.cfg.WriteTimeout/10 {
				l.conn.SetWriteDeadline(now.Add(l.m.cfg.WriteTimeout))
				armedAt = now
			}
			_, err := l.conn.Write(buf)
			if cap(buf) > 2*writeBatch {
				buf = make([]byte, 0, writeBatch) // a huge frame's buffer is not kept
			}
			if err != nil {
				reason := "hub write failed: " + err.Error()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					reason = fmt.Sprintf("app did not read its hub for %s", l.m.cfg.WriteTimeout)
				}
				l.shut(reason)
				return
			}
		}
	}
}

// open registers r as an open request of the link, holding the reader's
// token (see slots) until r is done. m.mu is held.
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
	r := NewReader(l.conn, MaxFrame)
	for {
		line, err := r.Next()
		if errors.Is(err, ErrFrameTooLong) {
			l.m.withLock(func() {
				l.sendFrame(&ErrorFrame{Code: CodeBadFrame, Message: fmt.Sprintf("line over %d bytes: discarded up to its newline", MaxFrame)})
			})
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
		l.handleLine(line)
	}
	<-l.wrote
	if f := l.m.beforeTeardown; f != nil {
		f()
	}
	l.m.teardown(l)
	close(l.done)
}

func (l *link) handleLine(line []byte) {
	up, pass, err := ParseLine(line)
	switch {
	case err != nil:
		var fe *FrameError
		errors.As(err, &fe)
		l.m.withLock(func() {
			l.sendFrame(&ErrorFrame{Code: CodeBadFrame, Message: fe.Reason, ReqID: fe.ReqID})
		})
	case pass:
		l.m.cfg.Events.AppFrame(l.appID, json.RawMessage(bytes.Clone(line)))
	default:
		switch f := up.(type) {
		case *Request:
			// Wait for a token: with MaxOpenRequests open, the app's
			// next request waits in its socket.
			select {
			case l.slots <- struct{}{}:
			case <-l.closing:
				return
			}
			l.m.mu.Lock()
			l.spare = true
			l.m.mu.Unlock()
			l.m.onRequest(l, f)
			l.m.mu.Lock()
			if l.spare {
				l.spare = false
				<-l.slots
			}
			l.m.mu.Unlock()
		case *ToolResult:
			l.m.onToolResult(l, f)
		}
	}
}

func (m *Manager) withLock(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}
