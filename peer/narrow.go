package peer

import (
	"slices"

	"go.uber.org/zap"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// ReasonGrantRevoked is the reason of the context_closed, turn.end and
// tool_cancel frames of what a reload that narrowed grants ended.
const ReasonGrantRevoked = "grant_revoked"

// narrow sets the app's reloaded entry and developer mode and applies them
// at once to what its live link holds:
//
//   - requests waiting for consent are checked again (those at the store
//     are when done: stillGranted), failing not_granted;
//   - without the service the consent prompt is withdrawn and every
//     context closes;
//   - a context of an account no longer granted closes, with its turns
//     and calls;
//   - a call of a tool no longer granted ends (tool_cancel if sent).
func (p *peer) narrow(app policy.App, dev bool) {
	old, oldDev := p.app, p.dev
	p.app, p.dev = app, dev
	l := p.link
	if l == nil || l.isShut() {
		return
	}
	service := p.serviceGranted(app)
	lost := (oldDev || slices.Contains(old.Grants.Services, policy.ServiceAgent)) && !service
	revoked, tools := missing(old.Sandbox.Accounts, app.Sandbox.Accounts), missing(old.Grants.Tools, app.Grants.Tools)

	kept := p.waiting[:0]
	for _, r := range p.waiting {
		if r.state == reqWaitingConsent && r.link == l {
			if e := p.granted(app, r.method); e != nil {
				p.finish(r, e)
				continue
			}
		}
		kept = append(kept, r)
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	if a := p.ask; lost && a != nil && a.link == l && !a.deciding {
		// Nothing to consent to (its requests failed above).
		p.settle(a, ApprovalCancelled)
	}

	closing := sortedValues(l.contexts, func(c *appContext) bool { return lost || slices.Contains(revoked, c.account) })
	for _, c := range closing {
		p.closeContext(c, ReasonGrantRevoked, true)
	}

	ending := sortedValues(l.calls, func(c *call) bool { return slices.Contains(tools, c.name) })
	for _, c := range ending {
		p.endCall(c, callCancelled, failResult(c, CodeDeclined, c.name+" is no longer in the grants.tools of app "+l.appID+" (the manifest was reloaded)"), ReasonGrantRevoked)
	}

	if lost || len(revoked) > 0 || len(tools) > 0 || len(closing) > 0 {
		p.m.log.Info("grants narrowed on a live link", zap.String("app", l.appID), zap.Bool("service_revoked", lost),
			zap.Strings("accounts_revoked", revoked), zap.Strings("tools_revoked", tools),
			zap.Int("contexts_closed", len(closing)), zap.Int("calls_ended", len(ending)))
	}
}

// missing are the names of old not in now.
func missing(old, now []string) []string {
	var out []string
	for _, n := range old {
		if !slices.Contains(now, n) {
			out = append(out, n)
		}
	}
	return out
}

// granted is the refusal of method under app's grants (docs/protocol.md,
// checks 2 and 4), nil when allowed.
func (p *peer) granted(app policy.App, method string) *Error {
	if !p.serviceGranted(app) {
		return frame.Errorf(frame.CodeNotGranted, "app %s has no %s grant: add %q to its grants.services",
			app.ID, policy.ServiceAgent, policy.ServiceAgent)
	}
	if !slices.Contains(app.Grants.Methods, method) {
		return frame.Errorf(frame.CodeNotGranted, "%s is not in the grants.methods of app %s", method, app.ID)
	}
	return nil
}

// stillGranted refuses a request whose store work is done when a reload
// meanwhile took away its method, service or session.open account.
func (p *peer) stillGranted(r *request, account string) *Error {
	app := p.app
	if e := p.granted(app, r.method); e != nil {
		return e
	}
	if r.method == policy.MethodSessionOpen && account != "" && !slices.Contains(app.Sandbox.Accounts, account) {
		return frame.Errorf(frame.CodeNotGranted, "account %q is not in the sandbox.accounts of app %s", account, app.ID)
	}
	return nil
}
