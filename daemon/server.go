package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"octosup/internal/trywrite"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"octosup/control"
	"octosup/internal/strictjson"
	"octosup/jail"
	"octosup/peer"
	"octosup/supervisor"
)

// Handler serves one op. args are the request's args (nil when absent);
// the result is marshaled as the answer's data. An error that is a
// *control.Error is answered as is; any other error is internal.
type Handler func(ctx context.Context, c *Conn, args json.RawMessage) (any, error)

// Queue sizes. A connection queues at most connQueue lines for its
// writer, and holds at most connQueueBytes bytes not yet written to its
// socket: an event past either drops the connection, an answer waits for
// room. It runs at most maxInflight requests at once; reading the next
// request waits for a free slot, which slows that client only.
const (
	connQueue      = 1024
	connQueueBytes = 16 << 20
	maxInflight    = 64
	writeTimeout   = 10 * time.Second
	defaultLines   = 100
	// supervisorBuffer is the queue of the server's own subscription to
	// the supervisor; it only forwards into per-connection queues.
	supervisorBuffer = 4096
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Apps Apps
	Log  *zap.Logger
	// Reload re-reads and applies the manifest for the reload op. It
	// returns the number of apps of the new manifest and what applying
	// it did; a manifest that does not validate is a
	// *policy.ValidationError and changes nothing.
	Reload func(ctx context.Context, opt supervisor.ApplyOptions) (apps int, done supervisor.Applied, err error)
	// LinkStatus fills each app's link member in status; nil reports no
	// link.
	LinkStatus func(appID string) control.LinkStatus
	// Store fills status's store member; nil leaves it out.
	Store func() *control.StoreStatus
	// JailSpec compiles the jail the app would get if it started now, for
	// the jail op (the daemon's launcher and environment); nil refuses
	// the op. An unknown app wraps supervisor.ErrUnknownApp.
	JailSpec func(appID string) (jail.Spec, error)
}

// Server is the control socket's server. Handle and AddTopic may be
// called before Serve; Publish any time.
type Server struct {
	cfg ServerConfig
	log *zap.Logger
	hub hub
	uid int // the only uid served: the daemon's own
	// debug: the logger takes Debug entries (fixed when it is built), so
	// each op's are worth building.
	debug bool

	// peerPidfd gets a pidfd of a socket's peer: SO_PEERPIDFD (tests
	// stand in a kernel without it).
	peerPidfd    func(sock int) (int, error)
	fallbackOnce sync.Once

	// published is how far the state events went out, which a lifecycle
	// op's answer waits for.
	published published

	mu      sync.RWMutex
	ops     map[string]Handler
	ordered map[string]bool // ops run in arrival order on the reader
	topics  map[string]bool
}

// NewServer returns a server with the built-in ops registered.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.LinkStatus == nil {
		cfg.LinkStatus = func(string) control.LinkStatus { return control.LinkStatus{} }
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Log,
		uid:       os.Getuid(),
		peerPidfd: getPeerPidfd,
		debug:     cfg.Log.Core().Enabled(zapcore.DebugLevel),
		topics: map[string]bool{
			control.TopicState:    true,
			control.TopicLog:      true,
			control.TopicApproval: true,
			control.TopicAppFrame: true,
		},
	}
	s.ops = builtinOps(s)
	s.ordered = map[string]bool{}
	return s
}

// Handle registers the handler of an op. It replaces nothing: a second
// registration of the same op is a programming error and panics.
func (s *Server) Handle(op string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.ops[op]; dup {
		panic(fmt.Sprintf("daemon: op %q registered twice", op))
	}
	s.ops[op] = h
}

// HandleOrdered registers an op whose requests on one connection run one
// at a time, in the order they arrived, on the connection's reader: what
// they do (e.g. a kernel's request.reply then its request.events) happens
// in the order the client sent it. Its handler must not block for long:
// the connection reads nothing else meanwhile.
func (s *Server) HandleOrdered(op string, h Handler) {
	s.Handle(op, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ordered[op] = true
}

// AddTopic makes a topic subscribable.
func (s *Server) AddTopic(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[topic] = true
}

// Publish sends an event to every connection subscribed to topic. The
// event must marshal to a JSON object; its members follow "event": topic
// on the line. An event with an "app" member reaches streams about that
// app (logs with follow) too. Publish never blocks.
func (s *Server) Publish(topic string, event any) {
	line, err := control.EncodeEvent(topic, event)
	if err != nil {
		s.log.Error("drop event", zap.String("topic", topic), zap.Error(err))
		return
	}
	s.hub.publish(topic, line)
}

func (s *Server) handler(op string) (Handler, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.ops[op]
	return h, ok
}

func (s *Server) isOrdered(op string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ordered[op]
}

func (s *Server) knownTopic(t string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.topics[t]
}

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
				s.Publish(control.TopicState, stateEvent(st))
				s.published.note(st.ID, st.Since)
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
				s.Publish(control.TopicState, stateEvent(*ev.State))
				s.published.note(ev.State.ID, ev.State.Since)
			case ev.Kind == supervisor.KindLog && ev.Log != nil:
				s.Publish(control.TopicLog, logLine(*ev.Log))
			case ev.Kind == supervisor.KindWarning && ev.State != nil:
				// On the state topic, which the shell and watch follow:
				// the app's state, with what it ran into.
				se := stateEvent(*ev.State)
				se.Warning = ev.Warning
				s.Publish(control.TopicState, se)
			}
		}
	}
}

// serveConn runs one connection: the peer check, then the reader (this
// goroutine), one goroutine per request in flight and the writer.
func (s *Server) serveConn(ctx context.Context, nc net.Conn, accepted time.Duration) {
	log := s.log
	peer, proc, err := peerCred(nc, s.peerPidfd)
	if err != nil {
		log.Warn("refuse control connection: no peer credentials", zap.Error(err))
		nc.Close()
		return
	}
	log = log.With(zap.Int("peer_pid", peer.Pid), zap.Uint32("peer_uid", peer.UID))
	why := s.refuse(peer, proc, accepted)
	proc.close()
	if why != "" {
		log.Warn("refuse control connection", zap.String("why", why), zap.String("peer_pidfd", proc.how))
		line, _ := json.Marshal(control.Response{Error: control.Errorf(control.CodeNotPermitted, "%s", why)})
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(append(line, '\n'))
		nc.Close()
		return
	}

	cctx, cancel := context.WithCancel(ctx)
	c := newConn(cctx, cancel, s, nc, peer, log)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		c.writeLoop()
	}()
	// The server's shutdown ends the read.
	stop := context.AfterFunc(ctx, func() { nc.Close() })

	var inflight sync.WaitGroup
	c.readLoop(cctx, &inflight)
	inflight.Wait() // every request read gets its answer queued
	stop()
	s.hub.removeConn(c)
	cancel()
	// No handler runs any more, so no hook can be added now: each runs
	// exactly once, before the connection is gone for good.
	c.hookMu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.hookMu.Unlock()
	for _, f := range hooks {
		f()
	}
	c.stop()
	writer.Wait()
	nc.Close()
}

// refuse says why a peer may not use the socket, "" when it may: only a
// process of the daemon's uid that the supervisor places outside every
// app, by the pidfd proc holds, may. accepted is when the connection was
// accepted (CLOCK_BOOTTIME), by which the peer had started.
func (s *Server) refuse(p Peer, proc peerProc, accepted time.Duration) string {
	if int(p.UID) != s.uid {
		return fmt.Sprintf("uid %d may not use this control socket: octosupd serves only uid %d", p.UID, s.uid)
	}
	const apps = "supervised apps may not use the control socket, and a peer not shown to be outside every app is taken for one"
	if proc.err != nil {
		return fmt.Sprintf("process %d cannot be placed outside every app: %v: %s", p.Pid, proc.err, apps)
	}
	if proc.how == "pidfd_open" {
		s.fallbackOnce.Do(func() {
			s.log.Warn("this kernel has no SO_PEERPIDFD (Linux 6.5): control socket peers are found by pid; a pid reused between a peer's connect and its accept could be taken for the peer")
		})
	}
	if err := s.cfg.Apps.CheckPeer(supervisor.Peer{Pid: p.Pid, Pidfd: proc.pidfd, StartedBy: accepted}); err != nil {
		return fmt.Sprintf("%v: %s", err, apps)
	}
	return ""
}

// Conn is one client connection, handed to each Handler.
type Conn struct {
	srv    *Server
	nc     net.Conn
	peer   Peer
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// The write queue, guarded by wmu: the lines (answers and events)
	// waiting for the writer, back to back in one buffer, which the
	// writer swaps for its own and writes in one go (one write per burst
	// under load). A line sent while the writer is idle and nothing
	// waits is written at once by its sender, as far as the socket takes
	// it without blocking, without waking the writer. Either way the
	// lines reach the socket in the order they took wmu.
	wmu     sync.Mutex
	pending []byte
	lines   int           // lines in pending
	batch   int           // bytes the writer holds, not yet written
	writing bool          // the writer holds a batch not yet written
	held    int           // holds (hold): what is sent meanwhile waits for the last release
	closed  bool          // the writer flushes and stops: nothing more is taken
	failed  bool          // a write failed: nothing more is written
	room    chan struct{} // closed when pending has room again; nil: nobody waits
	kick    chan struct{} // wakes the writer (capacity 1)
	quit    chan struct{} // closed when the writer is to flush and stop
	raw     syscall.RawConn

	quitOnce sync.Once
	dropOnce sync.Once

	subMu sync.Mutex
	sub   *stream // the subscribe op's stream, once subscribed

	// kernel is the peer link's kernel session once this connection ran
	// kernel.attach (peer_ops.go).
	kernel atomic.Pointer[peer.KernelSession]

	hookMu sync.Mutex
	hooks  []func() // OnClose's, run at teardown
}

func newConn(ctx context.Context, cancel context.CancelFunc, s *Server, nc net.Conn, p Peer, log *zap.Logger) *Conn {
	c := &Conn{
		srv: s, nc: nc, peer: p, log: log, ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn() // without it, every line goes through the writer
	}
	return c
}

// OnClose runs f when the connection ends, after its last request was
// answered and before Serve returns: a handler's way to own what the
// connection started (an attached kernel) without a goroutine of its own.
func (c *Conn) OnClose(f func()) {
	c.hookMu.Lock()
	defer c.hookMu.Unlock()
	c.hooks = append(c.hooks, f)
}

// Peer is who is at the other end of a connection (SO_PEERCRED).
type Peer struct {
	Pid      int
	UID, GID uint32
}

// Peer is the connection's peer.
func (c *Conn) Peer() Peer { return c.peer }

// Log is the connection's logger (it names the peer).
func (c *Conn) Log() *zap.Logger { return c.log }

// Done is closed when the connection ended (or is being torn down).
func (c *Conn) Done() <-chan struct{} { return c.ctx.Done() }

// Event sends an event to this connection only (e.g. to an attached
// kernel). It never blocks: a connection that cannot take it is dropped,
// and Event returns an error saying so.
func (c *Conn) Event(topic string, event any) error {
	line, err := control.EncodeEvent(topic, event)
	if err != nil {
		return err
	}
	if !c.sendEvent(line) {
		return fmt.Errorf("send %s event: the connection is gone or too slow", topic)
	}
	return nil
}

// sendEvent sends an event line without blocking; a connection over its
// bounds is dropped: a subscriber that does not read is cut off, never
// waited for. line is not kept (a published line goes to many).
func (c *Conn) sendEvent(line []byte) bool {
	c.wmu.Lock()
	if c.closed || c.failed {
		c.wmu.Unlock()
		return false
	}
	var why string
	switch q := len(c.pending) + c.batch; {
	case q+len(line)+1 > connQueueBytes:
		why = fmt.Sprintf("slow subscriber: %d bytes of events not read", q)
	case c.lines >= connQueue:
		why = "slow subscriber: its queue of events is full"
	}
	if why != "" {
		c.wmu.Unlock()
		c.drop(why)
		return false
	}
	return c.put(line)
}

// put writes line (and its newline) at once when the writer is idle,
// nothing waits and no answer is held, as far as the socket takes it
// without blocking, and queues the rest for the writer. wmu is held; put
// releases it. It reports false when the connection failed.
func (c *Conn) put(line []byte) bool {
	direct := c.raw != nil && c.held == 0 && !c.writing && len(c.pending) == 0
	c.pending = append(c.pending, line...)
	c.pending = append(c.pending, '\n')
	c.lines++
	if direct {
		return c.flushLocked()
	}
	// While an answer is held its holder writes what queued meanwhile
	// (release), unless that grows: then the writer starts on it.
	kick := c.held == 0 || c.lines >= connQueue/4 || len(c.pending) >= writeBatch
	c.wmu.Unlock()
	if kick {
		c.wake()
	}
	return true
}

// flushLocked writes pending without blocking and hands the writer what
// the socket did not take. wmu is held, the writer idle; it releases
// wmu.
func (c *Conn) flushLocked() bool {
	n, err := trywrite.Write(c.raw, c.pending)
	if err != nil {
		c.failLocked()
		c.wmu.Unlock()
		c.drop("write failed: " + err.Error())
		return false
	}
	if n == len(c.pending) {
		c.pending = c.pending[:0]
		c.lines = 0
		c.wakeRoomLocked()
		c.wmu.Unlock()
		return true
	}
	c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	c.wmu.Unlock()
	c.wake()
	return true
}

func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // the writer is awake already
	}
}

// wakeRoomLocked lets answers waiting for room in pending try again. wmu
// is held.
func (c *Conn) wakeRoomLocked() {
	if c.room != nil {
		close(c.room)
		c.room = nil
	}
}

// failLocked marks the connection unwritable: what is queued is dropped
// and nobody waits for room any more. wmu is held.
func (c *Conn) failLocked() {
	c.failed = true
	c.pending, c.lines, c.batch = nil, 0, 0
	c.wakeRoomLocked()
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

// stop has the writer write what is queued and end; nothing sent after
// it is taken.
func (c *Conn) stop() {
	c.quitOnce.Do(func() {
		c.wmu.Lock()
		c.closed = true
		c.wakeRoomLocked()
		c.wmu.Unlock()
		close(c.quit)
	})
}

// reply sends an answer; it waits for room (the client's own backlog),
// and gives up only when the connection is gone.
func (c *Conn) reply(resp control.Response) { c.answer(resp, nil) }

// answer sends an answer, then runs follow (nil: none). While follow
// runs the answer is held: what follow sends (the events the answer
// announces) goes out with it, in one write, after it.
func (c *Conn) answer(resp control.Response, follow func()) {
	line, err := encodeResponse(resp)
	if err == nil && len(line) > control.MaxLine {
		resp.OK, resp.Data = false, nil
		resp.Error = control.Errorf(control.CodeInternal, "the answer is larger than %d bytes: ask for less (e.g. fewer log lines)", control.MaxLine)
		line, err = encodeResponse(resp)
	}
	if err != nil {
		c.log.Error("encode answer", zap.Error(err))
		line, _ = json.Marshal(control.Response{ID: resp.ID, Error: control.Errorf(control.CodeInternal, "encode answer: %v", err)})
	}
	c.wmu.Lock()
	for c.lines >= connQueue && !c.closed && !c.failed {
		if c.room == nil {
			c.room = make(chan struct{})
		}
		room := c.room
		c.wmu.Unlock()
		<-room // closed by the writer taking the queue, by a failure or by stop
		c.wmu.Lock()
	}
	if c.closed || c.failed {
		c.wmu.Unlock()
		if follow != nil {
			follow()
		}
		return
	}
	if follow == nil {
		c.put(line)
		return
	}
	c.held++
	c.put(line)
	// Released even if follow panics: a hold left behind would keep every
	// later line of the connection waiting for the writer's next wake-up.
	defer c.release()
	follow()
}

// hold keeps what is sent from being written until release (see answer
// and readLoop); the writer still takes it once it grows.
func (c *Conn) hold() {
	c.wmu.Lock()
	c.held++
	c.wmu.Unlock()
}

// release ends a hold: the last one writes what queued meanwhile, or
// hands it to the writer.
func (c *Conn) release() {
	c.wmu.Lock()
	c.held--
	if c.held > 0 || c.writing || c.closed || c.failed || len(c.pending) == 0 || c.raw == nil {
		wake := c.held == 0 && len(c.pending) > 0 && !c.failed
		c.wmu.Unlock()
		if wake {
			c.wake()
		}
		return
	}
	c.flushLocked()
}

// writeBatch caps the bytes of one write: the write deadline is checked
// (and moved) between them.
const writeBatch = 64 << 10

// writeLoop writes what is queued, all of it at each wake-up: one write
// per burst under load, no added latency when idle. After stop it
// writes what is left and ends.
func (c *Conn) writeLoop() {
	var buf []byte
	// The deadline moves at most every tenth of writeTimeout, not at
	// every write (moving it is a timer update of its own): every write
	// still has at least nine tenths of it.
	var armedAt time.Time
	for {
		var last bool
		select {
		case <-c.kick:
		case <-c.quit:
			last = true
		}
		for {
			c.wmu.Lock()
			if len(c.pending) == 0 || c.failed {
				c.writing = false
				c.wmu.Unlock()
				break
			}
			// The written batch's buffer takes the next lines.
			buf, c.pending = c.pending, buf[:0]
			c.lines, c.batch, c.writing = 0, len(buf), true
			c.wakeRoomLocked()
			c.wmu.Unlock()
			for off := 0; off < len(buf); {
				end := min(off+writeBatch, len(buf))
				if now := time.Now(); now.Sub(armedAt) >= writeTimeout/10 {
					c.nc.SetWriteDeadline(now.Add(writeTimeout))
					armedAt = now
				}
				_, err := c.nc.Write(buf[off:end])
				c.wmu.Lock()
				if err != nil {
					c.failLocked()
					c.writing = false
					c.wmu.Unlock()
					why := "write failed: " + err.Error()
					if errors.Is(err, os.ErrDeadlineExceeded) {
						why = fmt.Sprintf("client did not read for %s", writeTimeout)
					}
					c.drop(why)
					return
				}
				c.batch -= end - off
				c.wmu.Unlock()
				off = end
			}
			if cap(buf) > 2*writeBatch {
				buf = nil // a burst's buffer is not kept
			}
		}
		if last {
			return
		}
	}
}

// readLoop reads requests until EOF or error. Each request runs in its
// own goroutine so that a slow op (stop waits for the grace period) does
// not hold the connection's other requests; an ordered op (HandleOrdered)
// runs here, so that a connection's ordered ops take effect in the order
// they were sent.
func (c *Conn) readLoop(ctx context.Context, inflight *sync.WaitGroup) {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	slots := make(chan struct{}, maxInflight)
	// While another whole request waits in r, what the handling of this
	// one sends is held (corked): the lines of a burst of requests go out
	// in one write once the last is handled, not in one write each (and
	// one wake-up of the client each). Nothing is held while the reader
	// may block.
	corked := false
	uncork := func() {
		if corked {
			corked = false
			c.release()
		}
	}
	defer uncork()
	for {
		line, tooLong, err := readRequestLine(r, control.MaxLine)
		more := err == nil && lineBuffered(r)
		if more && !corked {
			c.hold()
			corked = true
		}
		if tooLong {
			c.reply(control.Response{Error: control.Errorf(control.CodeBadRequest, "request line over %d bytes: skipped", control.MaxLine)})
		} else if len(line) > 0 {
			req, derr := control.DecodeRequest(line)
			if derr != nil {
				c.reply(control.Response{ID: req.ID, Error: control.Errorf(control.CodeBadRequest, "%v", derr)})
			} else if c.srv.isOrdered(req.Op) {
				c.handle(ctx, req)
			} else {
				select {
				case slots <- struct{}{}:
				default:
					uncork() // the wait may be long (a stop's grace)
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					defer func() { <-slots }()
					c.handle(ctx, req)
				}()
			}
		}
		if !more {
			uncork()
		}
		if err != nil {
			return
		}
	}
}

// lineBuffered reports whether r holds a whole line not yet read.
func lineBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}

// then wraps an answer whose follow-up (starting a stream) must run once
// the answer is queued.
type then struct {
	data any
	fn   func()
}

// AfterReply is a Handler's result whose answer carries data and after
// whose answer fn runs: events fn sends (Conn.Event) or lets through
// follow the answer on the wire, never precede it.
func AfterReply(data any, fn func()) any { return then{data: data, fn: fn} }

func (c *Conn) handle(ctx context.Context, req control.Request) {
	h, ok := c.srv.handler(req.Op)
	if !ok {
		c.reply(control.Response{ID: req.ID, Error: control.Errorf(control.CodeUnknownOp, "unknown op %q", req.Op)})
		return
	}
	// The clock and the log entry cost only when debug is on: this runs
	// for every op, a tool call's included.
	var start time.Time
	if c.srv.debug {
		start = time.Now()
	}
	data, err := h(ctx, c, req.Args)
	if err != nil {
		cerr := asControlError(err)
		if cerr.Code == control.CodeInternal {
			c.log.Error("op failed", zap.String("op", req.Op), zap.Error(err))
		} else if c.srv.debug {
			c.log.Debug("op refused", zap.String("op", req.Op), zap.String("code", cerr.Code), zap.String("message", cerr.Message))
		}
		c.reply(control.Response{ID: req.ID, Error: cerr})
		return
	}
	var follow func()
	if t, ok := data.(then); ok {
		data, follow = t.data, t.fn
	}
	resp := control.Response{ID: req.ID, OK: true}
	if data != nil {
		b, merr := json.Marshal(data)
		if merr != nil {
			c.log.Error("encode op data", zap.String("op", req.Op), zap.Error(merr))
			c.reply(control.Response{ID: req.ID, Error: control.Errorf(control.CodeInternal, "encode answer: %v", merr)})
			return
		}
		resp.Data = b
	}
	c.answer(resp, follow)
	if c.srv.debug {
		c.log.Debug("op", zap.String("op", req.Op), zap.Duration("took", time.Since(start)))
	}
}

// asControlError maps an op's error to its wire form.
func asControlError(err error) *control.Error {
	var cerr *control.Error
	switch {
	case errors.As(err, &cerr):
		return cerr
	case errors.Is(err, supervisor.ErrUnknownApp):
		return control.Errorf(control.CodeUnknownApp, "%v", err)
	default:
		return control.Errorf(control.CodeInternal, "%v", err)
	}
}

// readRequestLine returns the next line without its newline. A line over
// max is discarded up to its newline without being buffered, and
// reported with tooLong. err is set at the end of the stream (a last
// line without newline is still returned).
func readRequestLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, rerr := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+1 || (rerr != nil && len(buf)+len(chunk) > max) {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case rerr == nil:
			if tooLong {
				return nil, true, nil
			}
			return buf[:len(buf)-1], false, nil
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		default:
			return buf, tooLong, rerr
		}
	}
}

// encodeResponse is json.Marshal of a Response, with the usual Data
// checked, not compacted a second time.
func encodeResponse(resp control.Response) ([]byte, error) {
	// The usual answer's Data is the daemon's own json.Marshal output,
	// which json.Marshal would write again as it is (strictjson's
	// Verbatim says so, strictly): it is appended, not compacted a second
	// time. Any other answer is json.Marshal's.
	if !resp.OK || resp.ID <= 0 || resp.Error != nil || !strictjson.Verbatim(resp.Data) {
		return json.Marshal(resp)
	}
	line := make([]byte, 0, len(resp.Data)+40)
	line = append(line, `{"id":`...)
	line = strconv.AppendInt(line, resp.ID, 10)
	line = append(line, `,"ok":true,"data":`...)
	line = append(line, resp.Data...)
	return append(line, '}'), nil
}
