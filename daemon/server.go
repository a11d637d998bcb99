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
	"octosup/peer"
	"octosup/supervisor"
)

// The control server is split by concern: this file has the Server, its
// op registry and the dispatch of a request to its handler and of the
// result to its answer; accept.go the accept loop; admit.go the client
// check; conn.go a connection and its write queue; read.go the read
// loop; fanout.go the subscriptions. doc.go states the concurrency model.

// handler serves one op. args are the request's args (nil when absent);
// the result is marshaled as the answer's data (see answerAt for the
// results whose answer is queued in a step of their own). An error that
// is a *control.Error is answered as is; any other error is internal.
type handler func(ctx context.Context, c *Conn, args json.RawMessage) (any, error)

// withArgs is the handler of f: the request's args decoded strictly
// into an A first (control.DecodeArgs), whose refusal is the answer.
func withArgs[A any](f func(ctx context.Context, c *Conn, args A) (any, error)) handler {
	return func(ctx context.Context, c *Conn, raw json.RawMessage) (any, error) {
		var args A
		if err := control.DecodeArgs(raw, &args); err != nil {
			return nil, err
		}
		return f(ctx, c, args)
	}
}

// Queue sizes. A connection queues at most connQueue lines for its
// socket, and holds at most connQueueBytes bytes not yet written: an
// event past either drops the connection, an answer waits for room (but
// those queued in a step that must not wait, an answerAt's other than a
// waitStep's: they drop the connection too). connQueue is twice the tool
// outcomes the peer side keeps while no kernel is attached
// (peer.DefaultRelayQueue), which a kernel's attach queues behind its
// answer in one step. It runs at most
// maxInflight requests at once; reading the next request waits for a
// free slot, which slows that client only.
const (
	connQueue      = 8192
	connQueueBytes = 16 << 20
	maxInflight    = 64
	writeTimeout   = 10 * time.Second
	defaultLines   = 100
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

	// mu guards the registry: ops and topics are added before Serve (by
	// the peer link's register, and tests), read by every request.
	mu      sync.RWMutex
	ops     map[string]handler
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

// handle registers the handler of an op. It replaces nothing: a second
// registration of the same op is a programming error and panics.
func (s *Server) handle(op string, h handler) { s.register(op, h, false) }

// handleOrdered registers an op whose requests on one connection run one
// at a time, in the order they arrived, on the connection's reader: what
// they do (e.g. a kernel's request.reply then its request.events) happens
// in the order the client sent it. Its handler must not block for long:
// the connection reads nothing else meanwhile.
func (s *Server) handleOrdered(op string, h handler) { s.register(op, h, true) }

func (s *Server) register(op string, h handler, ordered bool) {
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

// publish sends an event about app ("" none) to every connection
// subscribed to topic, and to the streams about that app (logs with
// follow). The event must marshal to a JSON object; its members follow
// "event": topic on the line. It is encoded only when some stream takes
// it (an app's every output line is published, most with nobody
// following), and publish never blocks.
func (s *Server) publish(topic, app string, event any) {
	to := s.fanout.takers(topic, app)
	if len(to) == 0 {
		return
	}
	line, err := control.EncodeEvent(topic, event)
	if err != nil {
		s.log.Error("drop event", zap.String("topic", topic), zap.Error(err))
		return
	}
	for _, st := range to {
		st.conn.event(line)
	}
}

// supervisorEvent publishes one of the supervisor's events, in the
// supervisor's step that made it (supervisor.Config.Publish): a state
// event is queued before the answer of the op that moved the app, a log
// line in its ring's order. It never blocks.
func (s *Server) supervisorEvent(ev supervisor.Event) {
	switch {
	case ev.Kind == supervisor.KindState && ev.State != nil:
		s.publish(control.TopicState, ev.State.ID, stateEvent(*ev.State))
	case ev.Kind == supervisor.KindLog && ev.Log != nil:
		s.publish(control.TopicLog, ev.Log.App, logLine(*ev.Log))
	case ev.Kind == supervisor.KindWarning && ev.State != nil:
		// On the state topic, which the shell and watch follow: the
		// app's state, with what it ran into.
		se := stateEvent(*ev.State)
		se.Warning = ev.Warning
		s.publish(control.TopicState, ev.State.ID, se)
	}
}

// lookup is the handler of op (nil: no such op) and whether it is
// ordered, in one look at the registry.
func (s *Server) lookup(op string) (h handler, ordered bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ops[op], s.ordered[op]
}

// answerAt is a handler's result whose answer is queued in the step that
// makes what it announces visible (a stream, a kernel, a call, a frame on
// its way to an app), by whoever takes that step: at calls queue (which
// never blocks) with the answer's data at that moment, and returns once
// it did. So nothing the step starts can reach the client before its
// answer: the one way the daemon keeps events behind the answer that
// announces them. An error from at is the answer instead, and queue must
// not have been called then. It is an interface so that tool.call's one
// allocation holds its args, its data and its step.
type answerAt interface {
	at(queue func(data any)) error
}

// step is an answerAt of a function.
type step func(queue func(data any)) error

func (f step) at(queue func(data any)) error { return f(queue) }

// waitStep is a step whose queue waits for room, as any other answer
// does: for a step that holds no lock another step needs (subscribe's).
type waitStep func(queue func(data any)) error

func (f waitStep) at(queue func(data any)) error { return f(queue) }

// dispatch runs one request's handler, h (lookup's: nil for an unknown
// op), and queues its answer.
func (c *Conn) dispatch(ctx context.Context, req control.Request, h handler) {
	if h == nil {
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
	if at, ok := data.(answerAt); ok {
		c.answerAt(req.ID, at)
	} else {
		c.putAnswer(c.okAnswer(req.ID, data))
	}
	if c.srv.debug {
		c.log.Debug("op", zap.String("op", req.Op), zap.Duration("took", time.Since(start)))
	}
}

// reply queues an answer; it waits for room (the client's own backlog),
// and gives up only when the connection is gone.
func (c *Conn) reply(resp control.Response) {
	c.putAnswer(c.encodeAnswer(resp))
}

// putAnswer queues an encoded answer, waiting for room as reply does.
func (c *Conn) putAnswer(line []byte) {
	_ = c.w.Put(line, linewriter.Opt{Now: true, Wait: c.ctx.Done()})
}

// okAnswer is the line of a successful answer with data (nil: none); data
// that does not encode is an internal error instead.
//
// It is encoded in one pass: a Response carries its data encoded already,
// which encoding/json scans twice more on the way into the line (a
// RawMessage is checked and compacted, and so is a MarshalJSON's
// output), the most of a large answer's cost (status of every app). An
// answer's id is a request's, never 0, so it needs no null.
func (c *Conn) okAnswer(id int64, data any) []byte {
	line, err := json.Marshal(struct {
		ID   int64 `json:"id"`
		OK   bool  `json:"ok"`
		Data any   `json:"data,omitempty"`
	}{id, true, data})
	if err != nil {
		c.log.Error("encode op data", zap.Int64("id", id), zap.Error(err))
		return c.encodeAnswer(control.Response{ID: id, Error: control.Errorf(control.CodeInternal, "encode answer: %v", err)})
	}
	if len(line) > control.MaxLine {
		return c.encodeAnswer(control.Response{ID: id, Error: answerTooLarge()})
	}
	return line
}

func answerTooLarge() *control.Error {
	return control.Errorf(control.CodeInternal, "the answer is larger than %d bytes: ask for less (e.g. fewer log lines)", control.MaxLine)
}

// encodeAnswer is resp's line (json.Marshal's); one too large for a
// line, or that cannot be encoded, is an internal error instead.
func (c *Conn) encodeAnswer(resp control.Response) []byte {
	line, err := json.Marshal(resp)
	if err == nil && len(line) > control.MaxLine {
		resp.OK, resp.Data, resp.Error = false, nil, answerTooLarge()
		line, err = json.Marshal(resp)
	}
	if err != nil {
		c.log.Error("encode answer", zap.Error(err))
		line, _ = json.Marshal(control.Response{ID: resp.ID, Error: control.Errorf(control.CodeInternal, "encode answer: %v", err)})
	}
	return line
}

// answerAt has at queue the answer of request id (answerAt). Corked
// meanwhile, for batching only: the answer and the first events of the
// step (tool.call's tool.acknowledged) leave in one write.
func (c *Conn) answerAt(id int64, at answerAt) {
	queued := false
	// Not Wait but for a waitStep: the step must not block (it may hold
	// an app's lock); a connection that far behind is dropped instead.
	o := linewriter.Opt{Now: true}
	if _, ok := at.(waitStep); ok {
		o.Wait = c.ctx.Done()
	}
	c.w.Hold()
	err := at.at(func(data any) {
		queued = true
		_ = c.w.Put(c.okAnswer(id, data), o)
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
		return unknownApp()
	default:
		// A peer refusal keeps its stable code; anything else is internal.
		return control.Errorf(peer.Code(err), "%v", err)
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
