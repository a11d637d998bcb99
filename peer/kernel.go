package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/internal/strictjson"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// Kernel is the agent kernel: the control connection that ran
// kernel.attach. Its methods run with the app's peer locked, in order per
// app, and must neither block (queue, or fail) nor call the Manager.
type Kernel interface {
	// Request hands over a turn request (event "request"); on error the
	// app is answered no_kernel.
	Request(KernelRequest) error
	// ContextClosed (event "context.closed"): a context is gone, and every
	// request of it ended.
	ContextClosed(app, contextID, reason string)
}

// KernelRequest is the "request" event: an app's turn method, with app,
// context and account from the daemon's own records.
type KernelRequest struct {
	App       string          `json:"app"`
	ReqID     string          `json:"req_id"`
	Method    string          `json:"method"`
	Args      json.RawMessage `json:"args"`
	ContextID string          `json:"context_id"`
	Account   string          `json:"account"`
}

// KernelReply is the args of op request.reply.
type KernelReply struct {
	App   string          `json:"app"`
	ReqID string          `json:"req_id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// KernelEvent is the args of op request.event.
type KernelEvent struct {
	App   string          `json:"app"`
	ReqID string          `json:"req_id"`
	Event json.RawMessage `json:"event"`
}

// TurnEnd is the type of the event that ends a turn's stream, sent by the
// kernel, or by the daemon when it ends a turn (interrupted, context
// closed, kernel detached).
const TurnEnd = "turn.end"

// KernelSession is one attached kernel, from AttachKernel to Detach.
type KernelSession struct {
	m *Manager
	k Kernel
}

// AttachKernel makes k the agent kernel, one at a time. A k that is a
// ToolRelay is the relay while attached, handed the outcomes kept while
// none was first. answered, if set, runs once k is accepted, before
// anything can reach it: the control socket queues its answer there. It
// must not block.
func (m *Manager) AttachKernel(k Kernel, answered func()) (*KernelSession, error) {
	s, dropped, err := m.attachKernel(k, answered)
	if err != nil {
		return nil, err
	}
	// Logged with no lock held: a stalled log sink stalls no step.
	m.relay.logDropped(dropped)
	m.log.Info("kernel attached")
	return s, nil
}

func (m *Manager) attachKernel(k Kernel, answered func()) (s *KernelSession, dropped int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, 0, ErrClosed
	}
	if m.kernel.Load() != nil {
		return nil, 0, ErrKernelAttached
	}
	s = &KernelSession{m: m, k: k}
	if answered != nil {
		answered()
	}
	if r, ok := k.(ToolRelay); ok {
		m.relay.mu.Lock()
		dropped = m.relay.install(r, s)
		m.relay.mu.Unlock()
	}
	m.kernel.Store(s)
	return s, dropped, nil
}

// Detach ends the session: its open turn requests fail (no_kernel before
// the kernel replied, turn.end kernel_detached after). Once it returns the
// Kernel gets no more callbacks; outcomes queue for the next. Detaching
// twice is harmless. It works under Manager.mu, so no next kernel attaches
// in between (its requests would be taken for this one's); a peer found s
// attached under its mu, so once each was locked here none calls k again.
func (s *KernelSession) Detach() {
	m := s.m
	m.mu.Lock()
	if m.kernel.Load() != s {
		m.mu.Unlock()
		return
	}
	m.kernel.Store(nil)
	m.relay.mu.Lock()
	if m.relay.owner == s {
		m.relay.install(nil, nil)
	}
	m.relay.mu.Unlock()
	failed := 0
	for _, p := range m.peers {
		p.run(func() { failed += p.kernelDetached() })
	}
	m.mu.Unlock()
	m.log.Info("kernel detached", zap.Int("requests_failed", failed))
}

// kernelDetached ends the requests the kernel held, and counts them.
func (p *peer) kernelDetached() int {
	p.lateReqs.clear() // no reply of that kernel comes now
	if p.link == nil {
		return 0
	}
	n := 0
	for _, r := range sortedValues(p.link.requests, nil) {
		if r.state == reqAtKernel || r.state == reqStreaming {
			p.endRequest(r, "kernel_detached", frame.Errorf(frame.CodeNoKernel, "the agent kernel detached before answering"))
			n++
		}
	}
	return n
}

func (p *peer) toKernel(r *request) {
	m := p.m
	s := m.kernel.Load()
	if s == nil {
		p.finish(r, frame.Errorf(frame.CodeNoKernel, "no agent kernel is attached"))
		return
	}
	l := r.link
	r.move(reqAtKernel)
	l.open(r)
	r.ctx.requests[r.id] = r
	if r.method == policy.MethodTurnStart {
		r.turn = &policy.Turn{Input: r.args.Input, Started: m.cfg.Now().UTC(), Events: []json.RawMessage{}}
	}
	r.timer = p.after(m.cfg.KernelTimeout, func() { p.kernelTimeout(r) })
	kr := KernelRequest{
		App: p.id, ReqID: r.id, Method: r.method, Args: r.args.Raw,
		ContextID: r.ctx.id, Account: r.ctx.account,
	}
	if err := s.k.Request(kr); err != nil {
		p.m.log.Warn("kernel refused a request", zap.String("app", p.id), zap.String("req_id", r.id), zap.Error(err))
		p.finish(r, frame.Errorf(frame.CodeNoKernel, "the agent kernel could not take the request"))
	}
}

func (p *peer) kernelTimeout(r *request) {
	if r.state != reqAtKernel || r.link.requests[r.id] != r {
		return
	}
	p.m.log.Warn("kernel did not answer in time", zap.String("app", p.id), zap.String("req_id", r.id))
	p.finish(r, frame.Errorf(frame.CodeTimeout, "the agent kernel did not answer within %s", p.m.cfg.KernelTimeout))
	// Until its late reply comes (or the kernel detaches), the req_id names
	// no new request, which that reply would answer.
	p.lateReqs.add(r.id, lateWindow)
}

// lateWindow bounds peer.lateReqs.
const lateWindow = 256

// onPeer runs f in a step of app's peer: ErrKernelDetached when s is not
// the attached kernel, ErrUnknownRequest when app never had a process.
func (s *KernelSession) onPeer(app string, f func(p *peer) error) error {
	if err := s.check(); err != nil {
		return err
	}
	p := s.m.peerOf(app)
	if p == nil {
		return refuse(ErrUnknownRequest, "the app is not connected: its requests ended with its process")
	}
	err := ErrClosed
	p.run(func() { err = f(p) })
	return err
}

// openRequest finds a request of the app the kernel may still answer.
func (p *peer) openRequest(s *KernelSession, reqID string) (*request, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p.link == nil {
		return nil, refuse(ErrUnknownRequest, "the app is not connected: its requests ended with its process")
	}
	r := p.link.requests[reqID]
	if r == nil && p.lateReqs.has(reqID) {
		p.lateReqs.remove(reqID)
		return nil, refuse(ErrUnknownRequest, "request %q timed out before this reply came (the app was told so)", reqID)
	}
	if r == nil || (r.state != reqAtKernel && r.state != reqStreaming) {
		return nil, refuse(ErrUnknownRequest, "no open turn request %q: it ended, or was never sent", reqID)
	}
	return r, nil
}

// Reply answers an app's turn request (op request.reply). An ok reply to
// octos.turn.start carries {"turn_id": ...}, and Event streams the turn;
// one to octos.turn.interrupt ends the interrupted turn's stream first.
func (s *KernelSession) Reply(rp KernelReply) error {
	return s.onPeer(rp.App, func(p *peer) error { return p.kernelReply(s, rp) })
}

func (p *peer) kernelReply(s *KernelSession, rp KernelReply) error {
	r, err := p.openRequest(s, rp.ReqID)
	if err != nil {
		return err
	}
	if r.state != reqAtKernel {
		return refuse(ErrUnknownRequest, "request %q was already answered", rp.ReqID)
	}
	if !rp.OK {
		if rp.Error == nil || !frame.KnownCode(rp.Error.Code) || rp.Data != nil {
			return refuse(ErrInvalid, "a failed reply needs error {code, message} with one of the peer link's error codes (docs/protocol.md), and no data")
		}
		p.finish(r, rp.Error)
		return nil
	}
	if rp.Error != nil {
		return refuse(ErrInvalid, "an ok reply has no error")
	}
	data, err := compactFrameValue("data", rp.Data)
	if err != nil {
		return err
	}
	if b, err := frame.EncodeDown(&frame.Reply{ReqID: r.id, OK: true, Data: data}); err == nil && len(b)-1 > frame.MaxFrame {
		return refuse(ErrInvalid, "the reply would be a %d-byte frame, over the %d-byte cap", len(b)-1, frame.MaxFrame)
	}
	switch r.method {
	case policy.MethodTurnStart:
		turnID, err := turnIDOf(data)
		if err != nil {
			return err
		}
		if r.ctx.turns[turnID] != nil {
			return refuse(ErrInvalid, "turn_id %q is already streaming in context %s: give each turn its own", turnID, r.ctx.id)
		}
		if _, used := r.ctx.turnIDs.used[turnID]; used {
			return refuse(ErrInvalid, "turn_id %q was used already in session %d (of context %s): turn ids are unique within a session, across its contexts and the daemon's restarts",
				turnID, r.ctx.session.ID, r.ctx.id)
		}
		r.move(reqStreaming)
		r.turn.TurnID = turnID
		r.ctx.turns[turnID] = r
		r.ctx.turnIDs.add(turnID, p.m.cfg.MaxTurns)
		r.link.sendFrame(&frame.Reply{ReqID: r.id, OK: true, Data: data})
	case policy.MethodTurnInterrupt:
		if t := r.ctx.turns[r.args.TurnID]; t != nil {
			p.endTurn(t, "interrupted", true)
		}
		fallthrough
	default:
		// Written at once (now) when it was the link's only open request;
		// else the writer gathers.
		r.move(reqDone)
		r.link.send(&frame.Reply{ReqID: r.id, OK: true, Data: data}, len(r.link.requests) == 0, false)
	}
	return nil
}

// Event streams an event of a turn to the app (op request.event), after
// its ok reply; a "turn.end" is the last.
func (s *KernelSession) Event(ev KernelEvent) error {
	return s.onPeer(ev.App, func(p *peer) error { return p.kernelEvent(s, ev) })
}

func (p *peer) kernelEvent(s *KernelSession, ev KernelEvent) error {
	r, err := p.openRequest(s, ev.ReqID)
	if err != nil {
		return err
	}
	if r.state != reqStreaming {
		return refuse(ErrInvalid, "reply to %s (with its turn_id) before streaming its events", r.method)
	}
	data, err := compactFrameValue("event", ev.Event)
	if err != nil {
		return err
	}
	if data == nil {
		return refuse(ErrInvalid, "missing event: send an object {\"type\": \"...\", ...}")
	}
	end, err := checkTurnEvent(data, r)
	if err != nil {
		return err
	}
	line, err := frame.EncodeDown(&frame.Event{ReqID: r.id, Event: data})
	if err != nil {
		return refuse(ErrInvalid, "event: %v", err)
	}
	if n := len(line) - 1; n > frame.MaxFrame {
		// The app cannot take it, and a turn missing an event is not the
		// turn the kernel meant: it ends, and the app hears why.
		p.endTurn(r, "event_too_large", true)
		return refuse(ErrInvalid, "the event would be a %d-byte frame, over the %d-byte cap: the turn was ended (event_too_large)", n, frame.MaxFrame)
	}
	if err := r.link.write(line, false, true); errors.Is(err, ErrQueueFull) {
		// As above: a turn missing an event is not the kernel's.
		p.endTurn(r, "queue_full", true)
		return refuse(ErrQueueFull, "%v: the turn was ended (queue_full)", err)
	} else if err != nil {
		return nil // the hub is gone: its teardown ends the turn
	}
	keepEvent(r, data)
	if end != "" {
		p.endTurn(r, end, false)
	}
	return nil
}

// keepEvent adds an event to its turn's history, or past maxTurnEvents or
// maxTurnBytes marks it truncated.
func keepEvent(r *request, data json.RawMessage) {
	if len(r.turn.Events) < maxTurnEvents && r.turnBytes+len(data) <= maxTurnBytes {
		r.turn.Events = append(r.turn.Events, data)
		r.turnBytes += len(data)
	} else {
		r.turn.Truncated = true
	}
}

// endRequest ends a request from outside (context closed, kernel
// detached): an unanswered one fails with e, a streaming turn ends with
// turn.end reason.
func (p *peer) endRequest(r *request, reason string, e *Error) {
	switch r.state {
	case reqAtKernel, reqAtStore, reqWaitingConsent, reqNew:
		p.finish(r, e)
	case reqStreaming:
		p.endTurn(r, reason, true)
	}
}

// endTurn ends a streaming turn, records it and retires its request;
// when announce, the daemon sends the turn.end itself.
func (p *peer) endTurn(r *request, reason string, announce bool) {
	if announce {
		ev, _ := json.Marshal(map[string]string{"type": TurnEnd, "turn_id": r.turn.TurnID, "reason": reason})
		keepEvent(r, ev)
		r.link.sendFrame(&frame.Event{ReqID: r.id, Event: ev})
	}
	r.turn.End = reason
	r.turn.Ended = p.m.cfg.Now().UTC()
	// On the store jobs: before any history read queued after it.
	turn, session := *r.turn, r.ctx.session.ID
	if !p.jobs.post(func() { p.recordTurn(session, turn) }) {
		p.m.log.Error("turn not recorded: the daemon is stopping", zap.String("app", p.id), zap.String("turn_id", turn.TurnID))
	}
	r.move(reqDone)
}

// recordTurn is a store job.
func (p *peer) recordTurn(session uint64, turn policy.Turn) {
	m := p.m
	busy, ok := p.busy()
	if !ok {
		m.log.Error("turn not recorded: the daemon is stopping", zap.String("app", p.id), zap.String("turn_id", turn.TurnID))
		return
	}
	switch err := m.store.AppendTurn(session, turn, m.limits, busy); {
	case errors.Is(err, policy.ErrLimit):
		// Streamed in full, but its record does not fit what the app's
		// other sessions leave.
		m.log.Warn("turn not recorded: the app is at its store limit", zap.String("app", p.id),
			zap.String("turn_id", turn.TurnID), zap.Error(err))
	case errors.Is(err, policy.ErrNoSession):
		// Evicted once its context closed: nobody can read it any more.
		m.log.Info("turn not recorded: its session was evicted", zap.String("app", p.id), zap.String("turn_id", turn.TurnID))
	case err != nil:
		m.log.Error("record turn", zap.String("app", p.id), zap.Error(err))
	}
}

func compactFrameValue(name string, v json.RawMessage) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return nil, refuse(ErrInvalid, "%s is not JSON: %v", name, err)
	}
	if buf.Len() > frame.MaxFrame { // the frame around it is checked by the caller
		return nil, refuse(ErrInvalid, "%s of %d bytes does not fit a %d-byte frame", name, buf.Len(), frame.MaxFrame)
	}
	if err := frame.CheckValue(buf.Bytes()); err != nil {
		return nil, refuse(ErrInvalid, "%s: %v", name, err)
	}
	return buf.Bytes(), nil
}

// turnIDOf is the turn_id of an ok reply to turn.start, refused when
// another member matches it folding case (as encoding/json reads).
func turnIDOf(data json.RawMessage) (string, error) {
	bad := refuse(ErrInvalid, "an ok reply to %s needs data {\"turn_id\": \"...\"} (1 to 128 printable ASCII)", policy.MethodTurnStart)
	if len(data) == 0 || data[0] != '{' {
		return "", bad
	}
	m, err := frame.Members(data)
	if err != nil {
		return "", bad
	}
	for name := range m {
		if name != "turn_id" && strings.EqualFold(name, "turn_id") {
			return "", refuse(ErrInvalid, "an ok reply to %s has %q beside \"turn_id\": an app that reads names regardless of case would take it for the turn's id", policy.MethodTurnStart, name)
		}
	}
	var id string
	if v := m["turn_id"]; len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &id) != nil || !frame.ValidID(id) {
		return "", bad
	}
	return id, nil
}

// checkTurnEvent refuses a kernel event that is not an object with a
// string type, or names another turn or context. A turn.end must name the
// turn and a reason, like the daemon's own, so an app reads every end
// alike; end is its reason ("" for other events).
func checkTurnEvent(data json.RawMessage, r *request) (end string, err error) {
	if data[0] != '{' {
		return "", refuse(ErrInvalid, "event must be a JSON object {\"type\": \"...\", ...}, not %s", strictjson.KindOf(data))
	}
	m, err := frame.Members(data)
	if err != nil {
		return "", refuse(ErrInvalid, "event: %v", err)
	}
	str := func(name string) (s string, ok bool) {
		v := m[name]
		ok = len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil
		return s, ok
	}
	typ, ok := str("type")
	if !ok || typ == "" || len(typ) > 128 {
		return "", refuse(ErrInvalid, "event needs \"type\", a string of 1 to 128 bytes (e.g. \"text\", or %q to end the turn)", TurnEnd)
	}
	turnID := r.turn.TurnID
	if v, present := m["turn_id"]; present {
		if id, ok := str("turn_id"); !ok || id != turnID {
			return "", refuse(ErrInvalid, "event's turn_id is %s, but request %s streams turn %q", v, r.id, turnID)
		}
	}
	if v, present := m["context_id"]; present {
		if id, ok := str("context_id"); !ok || id != r.ctx.id {
			return "", refuse(ErrInvalid, "event's context_id is %s, but turn %q is of context %s", v, turnID, r.ctx.id)
		}
	}
	if typ == TurnEnd {
		if _, present := m["turn_id"]; !present {
			return "", refuse(ErrInvalid, "a %s event needs \"turn_id\": %q (the turn it ends) and a \"reason\"", TurnEnd, turnID)
		}
		reason, ok := str("reason")
		if !ok || !frame.ValidID(reason) {
			return "", refuse(ErrInvalid, "a %s event needs \"reason\", 1 to 128 printable ASCII characters (e.g. \"completed\")", TurnEnd)
		}
		return reason, nil
	}
	return "", nil
}

// ToolCall hands the kernel's call (op tool.call) to app. Once accepted
// (nil), the ToolRelay gets one Acknowledged and one Finished for it,
// maybe before ToolCall returns (kept while none is installed). A refusal
// (ErrInvalid, ErrNotConnected, ErrDuplicate, ErrUnknownContext,
// ErrDeclined, ErrLimit, ErrKernelDetached) reaches no relay. accepted
// runs on acceptance, before anything else of the call, with the peer
// locked, and must not block: the control socket queues its answer there,
// ahead of tool.acknowledged and the sheet's events.
func (s *KernelSession) ToolCall(app string, kc control.ToolCall, accepted func()) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.m.toolCall(app, kc, s, accepted)
}

// ToolCancel withdraws an outstanding call (op tool.cancel): the app gets
// tool_cancel if it was sent it, the relay its outcome (failResult); a
// call not outstanding is ErrUnknownCall.
func (s *KernelSession) ToolCancel(app, callID string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.m.toolCancel(app, callID, s)
}

// check is ErrKernelDetached once s is not the attached kernel; a nil s
// (the tests' relay seam) passes.
func (s *KernelSession) check() error {
	if s != nil && s.m.kernel.Load() != s {
		return ErrKernelDetached
	}
	return nil
}
