package peer

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"octosup/policy"
)

// Approval kinds and states, as the control socket shows them.
const (
	KindConsent = "consent"
	KindTool    = "tool" // a confirm: host tool call

	ApprovalPending   = "pending"
	ApprovalAllowed   = "allowed"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"   // nobody answered in time: nothing persisted
	ApprovalCancelled = "cancelled" // its app's process ended: nothing persisted
)

// Approval is a question to the person: the "approval" event and an entry
// of op approvals.
type Approval struct {
	ID     string `json:"approval_id"`
	App    string `json:"app"`
	Kind   string `json:"kind"`
	State  string `json:"state"`
	Method string `json:"method,omitempty"` // the request that raised it
	// A tool approval's call: its id, tool, risk, args (shortened to 256
	// bytes), the context's account and the kernel's caller.
	CallID  string    `json:"call_id,omitempty"`
	Tool    string    `json:"tool,omitempty"`
	Risk    string    `json:"risk,omitempty"`
	Args    string    `json:"args,omitempty"`
	Account string    `json:"account,omitempty"`
	Caller  string    `json:"caller,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

type approval struct {
	Approval
	peer  *peer
	link  *link       // the process whose request raised it
	timer *time.Timer // a consent prompt's expiry; a tool sheet expires with its call
	call  *call       // a tool sheet's call
	// deciding: Approve is persisting the answer (off m.mu); expiry and
	// teardown leave the approval to it.
	deciding bool
}

// consentCache holds a peer's persisted decision once read ("" when the
// person was never asked).
type consentCache struct {
	loaded   bool
	decision policy.Decision
}

// loadConsent reads an app's persisted decision into its cache, off
// m.mu, unless it is cached already. A decision that changes meanwhile
// (Approve caches its own, RevokeConsent moves consentGen) wins over the
// read. A failed read leaves the cache empty.
func (m *Manager) loadConsent(p *peer) error {
	m.mu.Lock()
	if p.consent.loaded {
		m.mu.Unlock()
		return nil
	}
	gen, app := p.consentGen, p.app.ID
	m.mu.Unlock()
	c, ok, err := m.store.Consent(app)
	if f := m.afterConsentRead; f != nil {
		f()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	if !p.consent.loaded && p.consentGen == gen {
		p.consent = consentCache{loaded: true}
		if ok {
			p.consent.decision = c.Decision
		}
	}
	return nil
}

// askConsent raises the app's consent prompt unless one is open: requests
// that arrive meanwhile wait on the same one. m.mu is held.
func (m *Manager) askConsent(p *peer, r *request) {
	if p.ask != nil {
		return
	}
	m.nextApproval++
	now := m.cfg.Now().UTC()
	a := &approval{
		Approval: Approval{
			ID:      m.cfg.Nonce + "-a" + strconv.FormatUint(m.nextApproval, 10),
			App:     p.app.ID,
			Kind:    KindConsent,
			State:   ApprovalPending,
			Method:  r.method,
			Created: now,
			Expires: now.Add(m.cfg.ConsentTimeout),
		},
		peer: p,
		link: r.link,
	}
	a.timer = time.AfterFunc(m.cfg.ConsentTimeout, func() { m.expire(a) })
	p.ask = a
	m.approvals[a.ID] = a
	m.log.Info("asking for consent", zap.String("app", p.app.ID), zap.String("approval_id", a.ID))
	m.cfg.Events.Approval(a.Approval)
}

// settle closes an approval with a final state and publishes it. m.mu is
// held.
func (m *Manager) settle(a *approval, state string) {
	if a.timer != nil {
		a.timer.Stop()
	}
	if m.approvals[a.ID] == a && a.Kind == KindTool {
		a.peer.sheets--
	}
	delete(m.approvals, a.ID)
	if a.peer.ask == a {
		a.peer.ask = nil
	}
	a.State = state
	m.cfg.Events.Approval(a.Approval)
}

func (m *Manager) expire(a *approval) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.approvals[a.ID] != a || a.deciding {
		return
	}
	m.settle(a, ApprovalExpired)
	waiting := a.peer.waiting
	a.peer.waiting = nil
	for _, r := range waiting {
		if r.state == reqWaitingConsent {
			m.finish(r, errorf(CodeConsentRequired, "nobody answered the consent prompt for app %s within %s; the next request asks again", a.App, m.cfg.ConsentTimeout))
		}
	}
}

// Approvals lists the pending approvals (op approvals), oldest first.
func (m *Manager) Approvals() []Approval {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Approval, 0, len(m.approvals))
	for _, a := range m.approvals {
		out = append(out, a.Approval)
	}
	slices.SortFunc(out, func(a, b Approval) int { return a.Created.Compare(b.Created) })
	return out
}

// Approve answers a pending approval (op approve). The answer is
// persisted (fsync'd) off the Manager's lock, and acted on only once it
// is: when Approve returns nil, a daemon killed at any moment keeps it.
//
// Consent: the decision is persisted always (remember does not matter);
// the requests that waited on the prompt then run (allow) or fail
// consent_denied (deny), in arrival order. A prompt whose process is
// already gone (shut, not yet torn down) is settled cancelled, nothing is
// persisted, and Approve returns ErrUnknownApproval. (A process that dies
// while the answer is being written does not undo it: the person did
// decide.)
//
// Tool: allow writes the call to its app, deny ends it Error{declined}.
// With remember the decision is first persisted as a standing rule for
// the app and tool (a failure to persist changes nothing), and it answers
// the app's other open sheets for that tool too.
//
// Its errors do not repeat the id: the caller knows which it answered.
func (m *Manager) Approve(id string, d policy.Decision, remember bool) error {
	if _, err := policy.ParseDecision(string(d)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	m.mu.Lock()
	a := m.approvals[id]
	if a == nil || a.deciding {
		m.mu.Unlock()
		return ErrUnknownApproval
	}
	if a.Kind == KindConsent && (a.peer.link != a.link || a.link.isShut()) {
		m.settle(a, ApprovalCancelled)
		m.mu.Unlock()
		return fmt.Errorf("%w: the process that asked has ended", ErrUnknownApproval)
	}
	a.deciding = true
	now := m.cfg.Now().UTC()
	m.mu.Unlock()

	var err error
	switch {
	case a.Kind == KindConsent:
		err = m.store.SetConsent(policy.Consent{App: a.App, Decision: d, At: now})
	case remember:
		err = m.store.SetRule(policy.Rule{App: a.App, Tool: a.Tool, Decision: d, At: now})
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	a.deciding = false
	if err != nil {
		return fmt.Errorf("keep the decision: %w", err)
	}
	if a.Kind == KindTool && remember {
		m.rulesGen++ // a call placing now reads the rules again
	}
	if a.Kind == KindTool {
		m.answerTool(a, d, remember)
		return nil
	}
	p := a.peer
	p.consent = consentCache{loaded: true, decision: d}
	state := ApprovalAllowed
	if d == policy.Deny {
		state = ApprovalDenied
	}
	if m.approvals[a.ID] == a {
		m.settle(a, state)
	}
	m.log.Info("consent answered", zap.String("app", a.App), zap.String("decision", string(d)))
	waiting := p.waiting
	p.waiting = nil
	for _, r := range waiting {
		if r.state != reqWaitingConsent || r.link != p.link {
			continue
		}
		if d == policy.Allow {
			m.dispatch(r)
		} else {
			m.finish(r, consentDenied(a.App))
		}
	}
	return nil
}

// Consents lists the persisted decisions (op consent, action list).
func (m *Manager) Consents() ([]policy.Consent, error) { return m.store.Consents() }

// RevokeConsent forgets an app's decision (op consent, action revoke): its
// next request asks again. found reports whether there was one.
func (m *Manager) RevokeConsent(app string) (found bool, err error) {
	// Written off m.mu; a request that reads the cached decision before
	// the cache is cleared below simply came before the revoke.
	found, err = m.store.RevokeConsent(app)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.peers[app]; p != nil {
		p.consent = consentCache{}
		p.consentGen++
	}
	return found, nil
}

// teardown retires a link whose hub is closed: the consent prompt it raised
// is withdrawn (nothing persisted), its contexts close (the kernel told),
// and its open requests end. Nothing is written to the app: its hub is
// gone.
func (m *Manager) teardown(l *link) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := l.p
	if a := p.ask; a != nil && a.link == l && !a.deciding {
		m.settle(a, ApprovalCancelled)
	}
	if len(p.waiting) > 0 && p.waiting[0].link == l {
		p.waiting = nil
	}
	contexts := make([]*appContext, 0, len(l.contexts))
	for _, c := range l.contexts {
		contexts = append(contexts, c)
	}
	slices.SortFunc(contexts, func(a, b *appContext) int {
		if a.id < b.id {
			return -1
		}
		return 1
	})
	for _, c := range contexts {
		m.closeContext(c, "app_exited", false)
	}
	for _, r := range sortedRequests(l.requests) {
		r.move(reqDone)
	}
	// Every call has a context, so none should be left; if one is, it
	// still gets its outcome.
	for _, c := range l.calls {
		m.endCall(c, callCancelled, failResult(c, CodeCancelled, "the app's process ended"), "")
	}
	if p.link == l {
		p.link = nil
	}
	m.log.Info("link down", zap.String("app", l.appID), zap.String("reason", l.reason))
}

// consentDenied is the answer to every request of an app the person
// denied the agent service, the first ones as the later: what undoes it.
func consentDenied(app string) *Error {
	return errorf(CodeConsentDenied, "the person denied app %s the agent service; after `octosupctl consent revoke %s`, the app's next request asks again", app, app)
}
