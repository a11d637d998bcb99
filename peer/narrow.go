package peer

import (
	"slices"

	"go.uber.org/zap"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// ReasonGrantRevoked is the reason of the context_closed, turn.end and
// tool_cancel frames of what a reload that narrowed an app's grants
// ended.
const ReasonGrantRevoked = "grant_revoked"

// narrow sets a reloaded entry of the app and developer mode, and applies
// them to what the app's live link holds, which the grants it had let it
// make: a reload applies to the running process at once, not from its
// next start.
//
//   - Requests are checked against the grants when they arrive; those
//     still waiting to be served (for the consent prompt) are checked
//     again now: a method or service no longer granted fails them
//     not_granted. The store's work is checked again when it is done
//     (stillGranted).
//   - Without the service the app has no peer link: its consent prompt is
//     withdrawn and every context closes.
//   - A context whose account is no longer granted closes, with its
//     turns and tool calls.
//   - A tool call whose tool is no longer granted ends, the app told
//     (tool_cancel) if it was sent it.
func (p *peer) narrow(app policy.App, dev bool) {
	old, oldDev := p.app, p.dev
	p.app, p.dev = app, dev
	l := p.link
	if l == nil || l.isShut() {
		return
	}
	service := p.serviceGranted(app)
	lost := (oldDev || slices.Contains(old.Grants.Services, policy.ServiceAgent)) && !service
	var revoked []string
	for _, a := range old.Sandbox.Accounts {
		if !slices.Contains(app.Sandbox.Accounts, a) {
			revoked = append(revoked, a)
		}
	}
	var tools []string
	for _, t := range old.Grants.Tools {
		if !slices.Contains(app.Grants.Tools, t) {
			tools = append(tools, t)
		}
	}

	// Requests waiting for the consent prompt.
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
		// Nothing to consent to any more (its requests failed above).
		p.settle(a, ApprovalCancelled)
	}

	// Contexts: all of them without the service, else those of a revoked
	// account.
	closing := sortedValues(l.contexts, func(c *appContext) bool { return lost || slices.Contains(revoked, c.account) })
	for _, c := range closing {
		p.closeContext(c, ReasonGrantRevoked, true)
	}

	// Tool calls of a revoked tool, in the contexts left.
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

// granted is the refusal of a request for method under app's grants, nil
// when they allow it: checks (2) and (4) of docs/protocol.md.
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

// stillGranted is the refusal of a request whose store work is done, when
// a reload meanwhile took away its method, its service or the account of
// the session it opens; nil when it may be answered.
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
