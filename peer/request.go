package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// reqState is where an accepted request is; only request.move changes it.
type reqState int

const (
	reqNew            reqState = iota // accepted, not yet placed
	reqWaitingConsent                 // on its app's consent prompt
	reqAtStore                        // its store I/O is queued (atStore)
	reqAtKernel                       // handed to the kernel, no reply yet
	reqStreaming                      // turn.start replied ok; events flow until turn.end
	reqDone                           // replied (and, for a turn, ended)
)

func (s reqState) String() string {
	return [...]string{"new", "waiting_consent", "at_store", "at_kernel", "streaming", "done"}[s]
}

var reqMoves = [...][]reqState{
	reqNew:            {reqWaitingConsent, reqAtStore, reqAtKernel, reqDone},
	reqWaitingConsent: {reqAtStore, reqAtKernel, reqDone},
	reqAtStore:        {reqDone},
	reqAtKernel:       {reqStreaming, reqDone},
	reqStreaming:      {reqDone},
	reqDone:           nil,
}

// request is an accepted request that did not get its final answer at once.
type request struct {
	link      *link
	id        string
	method    string
	args      frame.Args
	ctx       *appContext // for methods that name a context
	state     reqState
	timer     *time.Timer // the kernel's reply deadline, while atKernel
	turn      *policy.Turn
	turnBytes int  // of turn's events (maxTurnBytes)
	slot      bool // holds a link.slots token until done
}

// move changes r's state along reqMoves; an illegal move is a bug, logged
// and not obeyed.
func (r *request) move(to reqState) bool {
	if !slices.Contains(reqMoves[r.state], to) {
		r.link.m.log.Error("illegal request state move", zap.String("app", r.link.appID),
			zap.String("req_id", r.id), zap.Stringer("from", r.state), zap.Stringer("to", to))
		return false
	}
	r.state = to
	if to != reqAtKernel && r.timer != nil {
		r.link.m.stop(r.timer)
		r.timer = nil
	}
	if to == reqDone {
		if r.slot {
			r.slot = false
			<-r.link.slots
		}
		delete(r.link.requests, r.id)
		if r.ctx != nil {
			delete(r.ctx.requests, r.id)
			if r.turn != nil && r.turn.TurnID != "" && r.ctx.turns[r.turn.TurnID] == r {
				delete(r.ctx.turns, r.turn.TurnID)
			}
		}
	}
	return true
}

// appContext is a live context: one process's handle on a session.
type appContext struct {
	id       string
	link     *link
	account  string
	client   string
	session  policy.Session
	requests map[string]*request // open requests naming it
	turns    map[string]*request // streaming turns, by turn_id
	calls    map[string]*call
	turnIDs  *sessionTurns // shared with its session's other contexts
}

// sessionTurns are the turn_ids used in a session, unique within it: its
// history's when its first open context opened, then those its contexts
// started; the last MaxTurns (what its history keeps), oldest first.
// contexts counts the open contexts sharing it.
type sessionTurns struct {
	used     map[string]struct{}
	order    []string
	contexts int
}

func (s *sessionTurns) add(id string, max int) {
	s.used[id] = struct{}{}
	s.order = append(s.order, id)
	if max > 0 && len(s.order) > max {
		delete(s.used, s.order[0])
		s.order = slices.Delete(s.order, 0, 1)
	}
}

func (p *peer) fail(l *link, reqID string, e *Error) {
	l.sendFrame(&frame.Reply{ReqID: reqID, Error: e})
}

// onRequestLine handles a request frame of n bytes the reader read
// holding a slots token, which an open request keeps. cost is what
// link.pace charges: nothing while it waits on the kernel or the person,
// n for one answered at once, and storeJobCost more for one the store
// answers, in microseconds.
func (p *peer) onRequestLine(l *link, f *frame.Request, n int) (cost int) {
	l.spare = true
	p.onRequest(l, f)
	if l.spare {
		l.spare = false
		<-l.slots
		return n
	}
	if r := l.requests[f.ReqID]; r == nil || r.state == reqAtStore {
		return n + storeJobCost
	}
	return 0
}

// storeJobCost is what a store read or write costs the daemon beyond a
// line (Config.UnaskedRate): some ten pass-through lines' work, so a
// history request in a loop, charged it, has the daemon at about the
// share a pass-through flood does (docs/protocol.md, "Limits").
const storeJobCost = 16 << 10

// onRequest takes a request frame: each gets exactly one reply (or, for a
// req_id still open, a duplicate error frame that is not a reply).
func (p *peer) onRequest(l *link, f *frame.Request) {
	if p.link != l || l.isShut() {
		return
	}
	if _, open := l.requests[f.ReqID]; open {
		l.sendFrame(&frame.ErrorFrame{Code: frame.CodeDuplicate, ReqID: f.ReqID,
			Message: fmt.Sprintf("req_id %q is still open on this link", f.ReqID)})
		return
	}
	if p.lateReqs.has(f.ReqID) {
		l.sendFrame(&frame.ErrorFrame{Code: frame.CodeDuplicate, ReqID: f.ReqID,
			Message: fmt.Sprintf("req_id %q timed out at the agent kernel, whose late reply may still come: give this request another req_id", f.ReqID)})
		return
	}
	if e := p.check(f.Method); e != nil {
		p.fail(l, f.ReqID, e)
		return
	}
	args, err := frame.DecodeArgs(f.Method, f.Args)
	if err != nil {
		p.fail(l, f.ReqID, frame.Errorf(frame.CodeBadFrame, "%s args: %v", f.Method, err))
		return
	}
	if n := frame.RelayedLen(f.Args); n > relayRoom {
		p.fail(l, f.ReqID, frame.Errorf(frame.CodeBadFrame, "%s args take %d bytes on the control socket (each <, > and & written as \\u003c), past the %d a relayed value may: send less", f.Method, n, relayRoom))
		return
	}
	r := &request{link: l, id: f.ReqID, method: f.Method, args: args}
	switch {
	case p.m.policyErr != nil:
		p.fail(l, f.ReqID, frame.Errorf(frame.CodeInternal, "the daemon could not read its consent records at start: restart it once its state file reads (its log says why)"))
	case p.choices.consent == policy.Deny:
		p.fail(l, f.ReqID, consentDenied(p.id))
	case p.choices.consent == policy.Allow:
		p.dispatch(r)
	default:
		r.move(reqWaitingConsent)
		l.open(r)
		p.waiting = append(p.waiting, r)
		p.askConsent(r)
	}
}

// check is the refusal of a request for method (docs/protocol.md, checks
// 1 to 4), nil when it may go on: an unknown method is refused between
// granted's two checks.
func (p *peer) check(method string) *Error {
	if p.serviceGranted(p.app) && !slices.Contains(policy.KnownMethods(), method) {
		return frame.Errorf(frame.CodeUnknownMethod, "no method %q (known: %v)", method, policy.KnownMethods())
	}
	return p.granted(p.app, method)
}

// dispatch runs a request whose app has consent.
func (p *peer) dispatch(r *request) {
	l := r.link
	if r.method != policy.MethodSessionOpen {
		c := l.contexts[r.args.ContextID]
		if c == nil {
			// One answer for another app's, a closed or a made-up id: an
			// app learns nothing about contexts it does not own.
			p.finish(r, frame.Errorf(frame.CodeUnknownContext, "no context %q on this link", r.args.ContextID))
			return
		}
		r.ctx = c
	}
	switch r.method {
	case policy.MethodSessionOpen:
		p.openSession(r)
	case policy.MethodSessionHistory:
		p.history(r)
	case policy.MethodContextClose:
		p.closeContext(r.ctx, "closed_by_app", true)
		p.finishOK(r, struct{}{})
	case policy.MethodTurnStart, policy.MethodTurnInterrupt:
		p.toKernel(r)
	}
}

func (p *peer) finish(r *request, e *Error) {
	if r.state != reqDone {
		r.move(reqDone)
	}
	p.fail(r.link, r.id, e)
}

func (p *peer) finishOK(r *request, data any) {
	if r.state != reqDone {
		r.move(reqDone)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		p.fail(r.link, r.id, frame.Errorf(frame.CodeInternal, "encode reply: %v", err))
		return
	}
	r.link.sendFrame(&frame.Reply{ReqID: r.id, OK: true, Data: raw})
}

// atStore runs io on the app's store jobs, then done in a step unless r
// ended meanwhile. The job waits for done, so the next job sees what this
// one made (a context).
func (p *peer) atStore(r *request, io func(), done func()) {
	r.move(reqAtStore)
	r.link.open(r)
	if r.ctx != nil {
		r.ctx.requests[r.id] = r
	}
	queued := p.jobs.post(func() {
		io()
		p.run(func() {
			if r.state == reqAtStore {
				done()
			}
		})
	})
	if !queued {
		p.finish(r, frame.Errorf(frame.CodeInternal, "the daemon is stopping"))
	}
}

func (p *peer) history(r *request) {
	var data json.RawMessage
	var err error
	sessionID := r.ctx.session.ID
	p.atStore(r, func() {
		data, err = p.m.historyData(r.id, sessionID)
	}, func() {
		if e := p.stillGranted(r, ""); e != nil {
			p.finish(r, e)
			return
		}
		if err != nil {
			p.m.log.Error("read history", zap.String("app", p.id), zap.Error(err))
			p.finish(r, frame.Errorf(frame.CodeInternal, "the daemon could not read this session's history"))
			return
		}
		r.move(reqDone)
		r.link.sendFrame(&frame.Reply{ReqID: r.id, OK: true, Data: data})
	})
}

// historyData is a history reply's data: the newest turns that fit one
// frame with the reply, oldest first, and "truncated": true when older
// ones were left out. The store walks newest first and stops at the first
// that does not fit, so at most a frame is read, whatever the session holds.
func (m *Manager) historyData(reqID string, session uint64) (json.RawMessage, error) {
	empty, err := frame.EncodeDown(&frame.Reply{ReqID: reqID, OK: true, Data: json.RawMessage(`{"turns":[],"truncated":true}`)})
	if err != nil {
		return nil, err
	}
	budget := frame.MaxFrame - (len(empty) - 1) // its newline is not part of the cap
	var kept [][]byte
	truncated := false
	err = m.store.History(session, func(turn []byte) bool {
		// Stored as json.Marshal wrote it: it goes in as it is.
		if len(turn)+1 > budget { // 1: the comma before it
			truncated = true
			return false
		}
		budget -= len(turn) + 1
		kept = append(kept, bytes.Clone(turn))
		return true
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(frame.MaxFrame - budget)
	buf.WriteString(`{"turns":[`)
	for i := len(kept) - 1; i >= 0; i-- {
		buf.Write(kept[i])
		if i > 0 {
			buf.WriteByte(',')
		}
	}
	buf.WriteByte(']')
	if truncated {
		buf.WriteString(`,"truncated":true`)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// busy reports the app's sessions with a live context, which the store
// never evicts; false when the Manager is closed. A store job takes it just
// before its I/O, and no context appears meanwhile: only store jobs make
// them, one at a time, each ending once the peer took its result.
func (p *peer) busy() (policy.Busy, bool) {
	busy := map[uint64]struct{}{}
	ok := p.run(func() {
		for _, c := range p.contexts {
			busy[c.session.ID] = struct{}{}
		}
	})
	return func(id uint64) bool {
		_, ok := busy[id]
		return ok
	}, ok
}

func (p *peer) openSession(r *request) {
	l := r.link
	accounts := p.app.Sandbox.Accounts
	account := r.args.Account
	switch {
	case account == "" && len(accounts) > 0:
		account = accounts[0]
	case account != "" && !slices.Contains(accounts, account):
		p.finish(r, frame.Errorf(frame.CodeNotGranted, "account %q is not in the sandbox.accounts of app %s", account, p.id))
		return
	}
	if n := len(l.contexts) + l.opening; n >= p.m.cfg.MaxContexts {
		p.finish(r, frame.Errorf(CodeQuotaExceeded, "app %s holds %d contexts, the most one process may: close one (%s) first",
			p.id, n, policy.MethodContextClose))
		return
	}
	l.opening++
	var s policy.Session
	var turnIDs []string
	var err error
	m := p.m
	title, now := r.args.Title, m.cfg.Now()
	p.atStore(r, func() {
		busy, ok := p.busy()
		if !ok {
			err = ErrClosed
			return
		}
		if s, err = m.store.OpenSession(p.id, account, title, now, m.limits, busy); err == nil {
			// So a reopened session's new context reuses no turn_id
			// (after a daemon restart too).
			turnIDs, err = m.store.TurnIDs(s.ID)
		}
	}, func() {
		p.opened(r, account, s, turnIDs, err)
	})
	if r.state == reqDone { // not queued: the daemon is stopping
		l.opening--
	}
}

// opened makes the context of a session.open the store has served.
func (p *peer) opened(r *request, account string, s policy.Session, turnIDs []string, err error) {
	l := r.link
	l.opening--
	if e := p.stillGranted(r, account); e != nil {
		// A reload took the grant away while the store worked: the
		// session stays recorded, but this process gets no context.
		p.finish(r, e)
		return
	}
	var le *policy.LimitError
	if errors.As(err, &le) {
		p.m.log.Info("session refused: the app is at a limit", zap.String("app", p.id), zap.Error(err))
		p.finish(r, frame.Errorf(CodeQuotaExceeded, "%s", le.Error()))
		return
	}
	if err != nil {
		p.m.log.Error("open session", zap.String("app", p.id), zap.Error(err))
		p.finish(r, frame.Errorf(frame.CodeInternal, "the daemon could not record the session"))
		return
	}
	c := &appContext{
		id:       fmt.Sprintf("%s-%d", p.m.cfg.Nonce, p.m.nextHandle.Add(1)),
		link:     l,
		account:  account,
		client:   p.id,
		session:  s,
		requests: map[string]*request{},
		turns:    map[string]*request{},
		calls:    map[string]*call{},
		turnIDs:  p.sessionTurns[s.ID],
	}
	if c.turnIDs == nil {
		// The session's first open context: its history says what was
		// used (an open context's set knows more).
		c.turnIDs = &sessionTurns{used: map[string]struct{}{}}
		for _, id := range turnIDs {
			c.turnIDs.add(id, p.m.cfg.MaxTurns)
		}
		p.sessionTurns[s.ID] = c.turnIDs
	}
	c.turnIDs.contexts++
	p.contexts[c.id] = c
	l.contexts[c.id] = c
	p.finishOK(r, map[string]string{"context_id": c.id})
}

// closeContext cancels a context's tool calls (tool_cancel each when
// tell), ends its requests (turn.end, or a cancelled reply), tells the
// kernel context.closed and, when tell, the app context_closed.
func (p *peer) closeContext(c *appContext, reason string, tell bool) {
	why, cancel := fmt.Sprintf("context %s closed (%s)", c.id, reason), ""
	if tell {
		cancel = reason
	}
	for _, call := range sortedValues(c.calls, nil) {
		p.endCall(call, callCancelled, failResult(call, frame.CodeCancelled, why), cancel)
	}
	for _, r := range sortedValues(c.requests, nil) {
		p.endRequest(r, reason, &Error{Code: frame.CodeCancelled, Message: why})
	}
	delete(p.contexts, c.id)
	delete(c.link.contexts, c.id)
	if c.turnIDs.contexts--; c.turnIDs.contexts == 0 {
		delete(p.sessionTurns, c.session.ID)
	}
	if s := p.m.kernel.Load(); s != nil {
		s.k.ContextClosed(p.id, c.id, reason)
	}
	if tell {
		c.link.sendFrame(&frame.ContextClosed{ContextID: c.id, Reason: reason})
	}
}

// sortedValues are the values of m that keep takes (all when nil) in key
// order: teardowns, narrowings and closes run in one order, not the map's.
func sortedValues[V any](m map[string]V, keep func(V) bool) []V {
	out := make([]V, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if keep == nil || keep(m[k]) {
			out = append(out, m[k])
		}
	}
	return out
}
