package peer

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/peer/internal/frame"
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
type Approval = control.Approval

type approval struct {
	Approval
	link  *link       // the process whose request raised it
	timer *time.Timer // a consent prompt's expiry; a tool sheet expires with its call
	call  *call       // a tool sheet's
	// deciding: Approve is persisting the answer off mu; expiry and
	// teardown leave the approval to it. lapsed: the deadline passed
	// meanwhile, so a write that fails expires it (else it would stay
	// pending with no deadline).
	deciding, lapsed bool
}

// askConsent raises the app's consent prompt unless one is open, which
// r then waits on.
func (p *peer) askConsent(r *request) {
	if p.ask != nil {
		return
	}
	m := p.m
	now := m.cfg.Now().UTC()
	a := &approval{
		Approval: Approval{
			ApprovalID: m.approvalID(),
			App:        p.id,
			Kind:       KindConsent,
			State:      ApprovalPending,
			Method:     r.method,
			Created:    now,
			Expires:    now.Add(m.cfg.ConsentTimeout),
		},
		link: r.link,
	}
	a.timer = p.after(m.cfg.ConsentTimeout, func() { p.expire(a) })
	p.ask = a
	p.raise(a)
	m.log.Info("asking for consent", zap.String("app", p.id), zap.String("approval_id", a.ApprovalID))
}

func (m *Manager) approvalID() string {
	return m.cfg.Nonce + "-a" + strconv.FormatUint(m.nextApproval.Add(1), 10)
}

// raise records a pending approval and publishes it.
func (p *peer) raise(a *approval) {
	p.approvals[a.ApprovalID] = a
	p.m.cfg.Events.Approval(a.Approval)
}

func (p *peer) settle(a *approval, state string) {
	p.m.stop(a.timer)
	if p.approvals[a.ApprovalID] == a {
		if a.Kind == KindTool {
			p.sheets--
		}
		delete(p.approvals, a.ApprovalID)
	}
	if p.ask == a {
		p.ask = nil
	}
	a.State = state
	p.m.cfg.Events.Approval(a.Approval)
}

func (p *peer) expire(a *approval) {
	if p.approvals[a.ApprovalID] != a {
		return
	}
	if a.deciding {
		a.lapsed = true
		return
	}
	p.settle(a, ApprovalExpired)
	waiting := p.waiting
	p.waiting = nil
	for _, r := range waiting {
		if r.state == reqWaitingConsent {
			p.finish(r, frame.Errorf(frame.CodeConsentRequired, "nobody answered the consent prompt for app %s within %s; the next request asks again", a.App, p.m.cfg.ConsentTimeout))
		}
	}
}

// Approvals lists the pending approvals (op approvals), oldest first.
func (m *Manager) Approvals() []Approval {
	out := []Approval{}
	for _, p := range m.peerList() {
		p.run(func() {
			for _, a := range p.approvals {
				out = append(out, a.Approval)
			}
		})
	}
	slices.SortFunc(out, func(a, b Approval) int { return a.Created.Compare(b.Created) })
	return out
}

// Approve answers a pending approval (op approve). The answer is persisted
// (fsync'd) on the app's store jobs, behind its queued store work, and
// acted on only then: once Approve returns nil, a killed daemon keeps it.
//
// Consent is always persisted (remember does not matter); the waiting
// requests then run or fail consent_denied, in arrival order. A prompt
// whose process is gone (shut, not yet torn down) is settled cancelled,
// ErrUnknownApproval, nothing persisted; one that dies while the answer
// is written does not undo it: the person did decide.
//
// Tool: allow writes the call to its app, deny ends it Error{declined}.
// remember first persists a standing rule for the app and tool (a failed
// write changes nothing) and answers the app's other sheets for the tool.
//
// Its errors do not repeat the id: the caller knows it.
func (m *Manager) Approve(id string, d policy.Decision, remember bool) error {
	if _, err := policy.ParseDecision(string(d)); err != nil {
		return refuse(ErrInvalid, "%w", err)
	}
	var p *peer
	var a *approval
	err := ErrUnknownApproval
	for _, q := range m.peerList() {
		q.run(func() {
			if q.approvals[id] != nil {
				p = q
				a, err = q.beginDecide(id)
			}
		})
		if p != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	now := m.cfg.Now().UTC()
	done := p.writePolicy(func() error {
		switch {
		case a.Kind == KindConsent:
			return m.store.SetConsent(policy.Consent{App: a.App, Decision: d, At: now})
		case remember:
			return m.store.SetRule(policy.Rule{App: a.App, Tool: a.Tool, Decision: d, At: now})
		}
		return nil
	}, func(ap *appPolicy) {
		switch {
		case a.Kind == KindConsent:
			ap.consent = d
		case remember:
			ap.rules[a.Tool] = d
		}
	}, func(err error) { p.decided(a, d, remember, err) })
	if done == nil {
		return ErrClosed
	}
	if err := <-done; err != nil {
		return fmt.Errorf("keep the decision: %w", err)
	}
	return nil
}

func (p *peer) beginDecide(id string) (*approval, error) {
	a := p.approvals[id]
	if a == nil || a.deciding {
		return nil, ErrUnknownApproval
	}
	if a.Kind == KindConsent && (p.link != a.link || a.link.isShut()) {
		p.settle(a, ApprovalCancelled)
		return nil, refuse(ErrUnknownApproval, "the process that asked has ended")
	}
	a.deciding = true
	return a, nil
}

// decided acts on an answer Approve persisted (err: it could not), the
// peer's choices just read back (writePolicy).
func (p *peer) decided(a *approval, d policy.Decision, remember bool, err error) {
	a.deciding = false
	if err != nil {
		if a.lapsed {
			p.expire(a)
		}
		return
	}
	if a.Kind == KindTool {
		p.answerTool(a, d, remember)
		return
	}
	if p.approvals[a.ApprovalID] == a {
		p.settle(a, answeredState(d))
	}
	p.m.log.Info("consent answered", zap.String("app", a.App), zap.String("decision", string(d)))
	waiting := p.waiting
	p.waiting = nil
	for _, r := range waiting {
		if r.state != reqWaitingConsent || r.link != p.link {
			continue
		}
		if d == policy.Allow {
			p.dispatch(r)
		} else {
			p.finish(r, consentDenied(a.App))
		}
	}
}

// answeredState is the final state of an approval answered d.
func answeredState(d policy.Decision) string {
	if d == policy.Deny {
		return ApprovalDenied
	}
	return ApprovalAllowed
}

// consentDenied answers every request of an app denied the agent
// service, saying what undoes it.
func consentDenied(app string) *Error {
	return frame.Errorf(frame.CodeConsentDenied, "the person denied app %s the agent service; once its consent is revoked (control op consent, action revoke), the app's next request asks again", app)
}
