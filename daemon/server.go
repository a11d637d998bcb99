package daemon

import (
	"bufio"
	"cmp"
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

// handler serves one op. args are nil when absent; the result is the
// answer's data (or an answerAt). An error is answered by asControlError.
type handler func(ctx context.Context, c *Conn, args json.RawMessage) (any, error)

// withArgs is f with the args decoded strictly (control.DecodeArgs).
func withArgs[A any](f func(ctx context.Context, c *Conn, args A) (any, error)) handler {
	return func(ctx context.Context, c *Conn, raw json.RawMessage) (any, error) {
		var args A
		if err := control.DecodeArgs(raw, &args); err != nil {
			return nil, err
		}
		return f(ctx, c, args)
	}
}

// A connection's queue bounds: an event past them drops the connection,
// as does an answerAt's answer but a waitStep's; other answers wait for
// room. connQueue is twice peer.DefaultRelayQueue, the outcomes kept
// while no kernel is attached, which kernel.attach queues behind its
// answer in one step. Past maxInflight requests, reading the next waits
// for a slot, which slows that client only.
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
	// Reload serves the reload op: the new manifest's app count and what
	// applying it did; an invalid manifest is a *policy.ValidationError
	// and changes nothing.
	Reload func(ctx context.Context, opt supervisor.ApplyOptions) (apps int, done supervisor.Applied, err error)
	// LinkStatus fills status's link members; nil reports no link.
	LinkStatus func(appID string) control.LinkStatus
	// Store fills status's store member; nil leaves it out.
	Store func() *control.StoreStatus
	// JailSpec compiles the jail the app would get if started now (the
	// jail op; nil refuses it). An unknown app wraps
	// supervisor.ErrUnknownApp.
	JailSpec func(appID string) (jail.Spec, error)
}

// Server is the control socket's server, exported for Config.Setup and
// so that NewServer and Serve can run it with any Apps.
type Server struct {
	cfg    ServerConfig
	log    *zap.Logger
	fanout fanout
	uid    int  // the only uid served: the daemon's own
	debug  bool // the logger takes Debug entries: worth building per op

	// peerPidfd is SO_PEERPIDFD; tests stand in a kernel without it
	// (ENOPROTOOPT), the only fallback they cover.
	peerPidfd    func(sock int) (int, error)
	fallbackOnce sync.Once

	// The registry, filled before Serve (NewServer, Config.Setup) and
	// only read after: no lock.
	ops     map[string]handler
	ordered map[string]bool // ops run in arrival order on the reader
	topics  map[string]bool
}

// NewServer returns a server with the built-in ops registered.
func NewServer(cfg ServerConfig) *Server {
	cfg.Log = cmp.Or(cfg.Log, zap.NewNop())
	if cfg.LinkStatus == nil {
		cfg.LinkStatus = func(string) control.LinkStatus { return control.LinkStatus{} }
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Log,
		uid:       os.Getuid(),
		peerPidfd: getPeerPidfd,
		debug:     cfg.Log.Core().Enabled(zapcore.DebugLevel),
		fanout:    fanout{streams: map[*stream]struct{}{}},
		topics:    map[string]bool{control.TopicState: true, control.TopicLog: true, control.TopicApproval: true, control.TopicAppFrame: true},
		ordered:   map[string]bool{},
	}
	s.ops = map[string]handler{
		control.OpStatus:    withArgs(s.opStatus),
		control.OpStart:     s.lifecycleOp(control.OpStart, Apps.Start),
		control.OpStop:      s.lifecycleOp(control.OpStop, Apps.Stop),
		control.OpRestart:   s.lifecycleOp(control.OpRestart, Apps.Restart),
		control.OpLogs:      withArgs(s.opLogs),
		control.OpSubscribe: withArgs(s.opSubscribe),
		control.OpReload:    withArgs(s.opReload),
		control.OpJail:      withArgs(s.opJail),
		control.OpHello:     withArgs(s.opHello),
		OpDebug:             withArgs(s.opDebug),
	}
	return s
}

// handle registers op's handler; registering an op twice panics.
func (s *Server) handle(op string, h handler) {
	if _, dup := s.ops[op]; dup {
		panic(fmt.Sprintf("daemon: op %q registered twice", op))
	}
	s.ops[op] = h
}

// handleOrdered registers an op whose requests run on the connection's
// reader, one at a time in arrival order (a kernel's request.reply, then
// its request.events). Its handler must not block for long: the
// connection reads nothing meanwhile.
func (s *Server) handleOrdered(op string, h handler) {
	s.handle(op, h)
	s.ordered[op] = true
}

// publish queues an event about app ("" none) on every stream that
// takes it; event must marshal to a JSON object. It is encoded only when
// some stream takes it (most app output has no follower). Never blocks.
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

// supervisorEvent is supervisor.Config.Publish, called in the step that
// made ev: a state event is queued before the answer of the op that
// moved the app, a log line in its ring's order. Never blocks.
func (s *Server) supervisorEvent(ev supervisor.Event) {
	switch {
	case (ev.Kind == supervisor.KindState || ev.Kind == supervisor.KindWarning) && ev.State != nil:
		// A warning too is on the state topic, which the shell and watch follow.
		st := ev.State // Warning is "" but in a warning
		s.publish(control.TopicState, st.ID, control.StateEvent{App: st.ID, State: string(st.State), Pid: st.Pid,
			Restarts: st.Restarts, Since: st.Since, LastExit: wireExit(st.LastExit), Reason: st.Reason, Warning: ev.Warning})
	case ev.Kind == supervisor.KindLog && ev.Log != nil:
		s.publish(control.TopicLog, ev.Log.App, logLine(*ev.Log))
	}
}

// answerAt is a handler's result whose answer is queued in the step that
// makes what it announces visible, by whoever takes that step: at calls
// queue (which waits only in a waitStep) with the data there, so nothing
// the step starts reaches the client first (doc.go, rule 3). An error
// from at is the answer instead, queue uncalled. An interface so that
// tool.call needs one allocation (toolCallStep).
type answerAt interface {
	at(queue func(data any)) error
}

// step is a function's answerAt.
type step func(queue func(data any)) error

func (f step) at(queue func(data any)) error { return f(queue) }

// waitStep is a step whose queue waits for room like a plain answer:
// only for a step holding no lock another step needs (subscribe's).
type waitStep func(queue func(data any)) error

func (f waitStep) at(queue func(data any)) error { return f(queue) }

// dispatch runs req's handler h (nil: unknown op) and queues the answer.
func (c *Conn) dispatch(ctx context.Context, req control.Request, h handler) {
	if h == nil {
		c.reply(control.Response{ID: req.ID, Error: control.Errorf(control.CodeUnknownOp, "unknown op %q", req.Op)})
		return
	}
	var start time.Time // only with debug: this runs for every op
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

// reply queues an answer, waiting for room (the client's own backlog)
// until the connection is gone.
func (c *Conn) reply(resp control.Response) {
	c.putAnswer(c.encodeAnswer(resp))
}

func (c *Conn) putAnswer(line []byte) {
	_ = c.w.Put(line, linewriter.Opt{Now: true, Wait: c.ctx.Done()})
}

// okAnswer is the line of a successful answer with data (nil: none), or
// an internal error's. Not a control.Response, whose RawMessage json
// scans twice more (most of a large answer's cost). The id is a
// request's, never 0: no null needed (Response.MarshalJSON).
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

// encodeAnswer is resp's line, or an internal error's when it is too
// large or does not encode.
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

// answerAt has at queue request id's answer. Corked meanwhile, for
// batching only: the answer and the step's first events (tool.call's
// tool.acknowledged) leave in one write.
func (c *Conn) answerAt(id int64, at answerAt) {
	queued := false
	// Only a waitStep waits: another step may hold an app's lock, and a
	// connection that far behind is dropped instead.
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
	if cerr, ok := errors.AsType[*control.Error](err); ok {
		return cerr
	}
	switch {
	case errors.Is(err, supervisor.ErrUnknownApp):
		return unknownApp() // not the supervisor's text: it repeats op and app
	default: // a peer refusal keeps its code; anything else is internal
		return control.Errorf(peer.Code(err), "%v", err)
	}
}

// readRequestLine returns the next line without its newline. A line over
// max is skipped unbuffered and reported tooLong. At the end of the
// stream err is set, with any last line lacking a newline.
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
