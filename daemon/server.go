package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"octosup/control"
	"octosup/internal/linewriter"
	"octosup/jail"
	"octosup/supervisor"
)

// The control server is split by concern: this file has the Server, its
// op registry and the dispatch of a request to its handler and of the
// result to its answer; accept.go the accept loop and the forwarding of
// the supervisor's events; admit.go the client check; conn.go a
// connection and its write queue; read.go the read loop; fanout.go the
// subscriptions. doc.go states the concurrency model.

// handler serves one op. args are the request's args (nil when absent);
// the result is marshaled as the answer's data (see answerThen and
// answerAt for the results that do more). An error that is a
// *control.Error is answered as is; any other error is internal.
type handler func(ctx context.Context, c *Conn, args json.RawMessage) (any, error)

// requestHandler is a handler given the whole request: tool.call's,
// whose args DecodeRequest read with the line (Request.ToolCallArgs).
// Every op is served as one.
type requestHandler func(ctx context.Context, c *Conn, req control.Request) (any, error)

func argsOnly(h handler) requestHandler {
	return func(ctx context.Context, c *Conn, req control.Request) (any, error) { return h(ctx, c, req.Args) }
}

// Queue sizes. A connection queues at most connQueue lines for its
// socket, and holds at most connQueueBytes bytes not yet written: an
// event past either drops the connection, an answer waits for room
// (but kernel.attach's and tool.call's, which the peer Manager queues in
// its own step, as it does events: they drop the connection too). It
// runs at most maxInflight requests at once; reading the next request
// waits for a free slot, which slows that client only.
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

// Server is the control socket's server. It is exported for Run's
// Config.Setup, which hands it to the code that starts a daemon in
// process (tests, benchmarks), and so that NewServer and Serve can run
// it with any Apps.
type Server struct {
	cfg    ServerConfig
	log    *zap.Logger
	fanout fanout
	uid    int // the only uid served: the daemon's own
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

	// mu guards the registry: ops and topics are added before Serve (by
	// the peer link's register, and tests), read by every request.
	mu      sync.RWMutex
	ops     map[string]requestHandler
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
	s.ops = map[string]requestHandler{}
	for op, h := range builtinOps(s) {
		s.ops[op] = argsOnly(h)
	}
	s.ordered = map[string]bool{}
	return s
}

// handle registers the handler of an op. It replaces nothing: a second
// registration of the same op is a programming error and panics.
func (s *Server) handle(op string, h handler) { s.register(op, argsOnly(h), false) }

// handleOrdered registers an op whose requests on one connection run one
// at a time, in the order they arrived, on the connection's reader: what
// they do (e.g. a kernel's request.reply then its request.events) happens
// in the order the client sent it. Its handler must not block for long:
// the connection reads nothing else meanwhile.
func (s *Server) handleOrdered(op string, h handler) { s.register(op, argsOnly(h), true) }

func (s *Server) register(op string, h requestHandler, ordered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.ops[op]; dup {
		panic(fmt.Sprintf("daemon: op %q registered twice", op))
	}
	s.ops[op] = h
	if ordered {
		s.ordered[op] = true
	}
}

// publish sends an event to every connection subscribed to topic. The
// event must marshal to a JSON object; its members follow "event": topic
// on the line. An event with an "app" member reaches streams about that
// app (logs with follow) too. publish never blocks.
func (s *Server) publish(topic string, event any) { s.publishSeq(topic, event, 0) }

// publishSeq is publish of an app's log line numbered seq.
func (s *Server) publishSeq(topic string, event any, seq uint64) {
	line, err := control.EncodeEvent(topic, event)
	if err != nil {
		s.log.Error("drop event", zap.String("topic", topic), zap.Error(err))
		return
	}
	s.fanout.publish(topic, line, seq)
}

func (s *Server) lookup(op string) (requestHandler, bool) {
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

// answerThen is a handler's result whose answer, as it is queued, makes
// something visible in the same step: then runs under the connection's
// queue lock right after the answer is queued (linewriter.Opt.Then), so
// that every event of what it makes visible (a subscription, an attached
// kernel) queues after the answer. It must not block, nor take a lock
// that is held by anyone who puts a line on a connection (doc.go).
type answerThen struct {
	data any
	then func(q *linewriter.Queue)
	// before, when set, runs under the same lock ahead of the answer
	// (linewriter.Opt.Before): an action whose effects the client must
	// hear of only after the answer (app.send: the app's reply to the
	// frame), and whose error is the answer instead.
	before func() error
}

// answerAt is a handler's result whose answer someone else queues, in
// the step that makes what it announces visible: at calls queue (which
// never blocks) at that moment, from whatever goroutine takes the step,
// and returns once it did. tool.call's at is the peer's ToolCall, which
// queues "accepted" in the step that accepts the call, before anything
// of the call happens; kernel.attach's is AttachKernel, which queues it
// before the kernel is visible. An error from at is the answer instead, and
// queue must not have been called then. It is an interface so that a
// handler's one allocation holds its args, its data and its step.
type answerAt interface {
	answerData() any
	at(queue func()) error
}

// dispatch runs one request's handler and queues its answer.
func (c *Conn) dispatch(ctx context.Context, req control.Request) {
	h, ok := c.srv.lookup(req.Op)
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
	data, err := h(ctx, c, req)
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
	var then func(*linewriter.Queue)
	var before func() error
	var at func(func()) error
	switch r := data.(type) {
	case answerThen:
		data, then, before = r.data, r.then, r.before
	case answerAt:
		data, at = r.answerData(), r.at
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
	line := c.encodeAnswer(resp)
	if at != nil {
		c.answerAt(resp.ID, line, at)
	} else if err := c.putAnswer(line, linewriter.Opt{Then: then, Before: before}); err != nil {
		var refused *linewriter.BeforeError
		if errors.As(err, &refused) {
			c.reply(control.Response{ID: req.ID, Error: asControlError(refused.Err)})
		}
	}
	if c.srv.debug {
		c.log.Debug("op", zap.String("op", req.Op), zap.Duration("took", time.Since(start)))
	}
}

// reply queues an answer; it waits for room (the client's own backlog),
// and gives up only when the connection is gone.
func (c *Conn) reply(resp control.Response) { c.answer(resp, nil) }

// answer queues an answer, then (nil: nothing) in the same step.
func (c *Conn) answer(resp control.Response, then func(*linewriter.Queue)) {
	_ = c.answerWith(resp, linewriter.Opt{Then: then})
}

// answerWith queues an answer with o's Then and Before (Now and Wait are
// answer's own). An answer that cannot be queued went with its
// connection: nothing of o is owed to it.
func (c *Conn) answerWith(resp control.Response, o linewriter.Opt) error {
	return c.putAnswer(c.encodeAnswer(resp), o)
}

// putAnswer is answerWith of an encoded answer.
func (c *Conn) putAnswer(line []byte, o linewriter.Opt) error {
	o.Now, o.Wait = true, c.ctx.Done()
	return c.w.Put(line, o)
}

// encodeAnswer is resp's line (json.Marshal's); one too large for a
// line, or that cannot be encoded, is an internal error instead.
func (c *Conn) encodeAnswer(resp control.Response) []byte {
	line, err := json.Marshal(resp)
	if err == nil && len(line) > control.MaxLine {
		resp.OK, resp.Data = false, nil
		resp.Error = control.Errorf(control.CodeInternal, "the answer is larger than %d bytes: ask for less (e.g. fewer log lines)", control.MaxLine)
		line, err = json.Marshal(resp)
	}
	if err != nil {
		c.log.Error("encode answer", zap.Error(err))
		line, _ = json.Marshal(control.Response{ID: resp.ID, Error: control.Errorf(control.CodeInternal, "encode answer: %v", err)})
	}
	return line
}

// answerAt has at queue the answer line of request id (answerAt).
// Corked meanwhile, for batching only: the answer and the first events of
// the step (tool.call's tool.acknowledged) leave in one write.
func (c *Conn) answerAt(id int64, line []byte, at func(queue func()) error) {
	queued := false
	c.w.Hold()
	err := at(func() {
		queued = true
		// Not Wait: queue runs in a step of the peer Manager, which must not
		// block; a connection that far behind is dropped instead.
		_ = c.w.Put(line, linewriter.Opt{Now: true})
	})
	c.w.Release()
	switch {
	case err != nil:
		c.reply(control.Response{ID: id, Error: asControlError(err)})
	case !queued:
		c.log.Error("an op's answer was never queued", zap.Int64("id", id))
		c.reply(control.Response{ID: id, Error: control.Errorf(control.CodeInternal, "the daemon lost this op's answer (a bug, logged): the op may have taken effect")})
	}
}

// asControlError maps an op's error to its wire form.
func asControlError(err error) *control.Error {
	var cerr *control.Error
	switch {
	case errors.As(err, &cerr):
		return cerr
	case errors.Is(err, supervisor.ErrUnknownApp):
		// The supervisor's error names the op and the app, which the
		// client knows (docs/control.md, "Error codes").
		return control.Errorf(control.CodeUnknownApp, "the manifest has no such app: status lists those it has")
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
