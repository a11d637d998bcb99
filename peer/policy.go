package peer

import (
	"slices"

	"go.uber.org/zap"

	"octosup/policy"
)

// Consent and standing rules are read once by New (loadPolicy) and kept by
// each peer, so a check is a lookup. A write goes to the store first and
// is read back into the peer on the app's store jobs (writePolicy): store
// and peer see the writes in one order, so an approve written before a
// revoke cannot undo it.

// appPolicy is an app's consent ("": never asked) and standing rules by
// tool.
type appPolicy struct {
	consent policy.Decision
	rules   map[string]policy.Decision
}

// loadPolicy reads every app's consent and standing rules. After a failed
// consent read (consentErr) every request that needs consent fails
// internal until a restart: asking again someone who denied is not the
// daemon's call. After a failed rules read (rulesErr) every host-confirmed
// call asks the person, as with no rule.
func loadPolicy(st Store) (kept map[string]appPolicy, consentErr, rulesErr error) {
	kept = map[string]appPolicy{}
	consents, consentErr := st.Consents()
	for _, c := range consents {
		ap := kept[c.App]
		ap.consent = c.Decision
		kept[c.App] = ap
	}
	rules, rulesErr := st.Rules("")
	for _, r := range rules {
		ap := kept[r.App]
		if ap.rules == nil {
			ap.rules = map[string]policy.Decision{}
		}
		ap.rules[r.Tool] = r.Decision
		kept[r.App] = ap
	}
	return kept, consentErr, rulesErr
}

func readPolicy(st Store, app string) (appPolicy, error) {
	ap := appPolicy{rules: map[string]policy.Decision{}}
	c, found, err := st.Consent(app)
	if err != nil {
		return ap, err
	}
	if found {
		ap.consent = c.Decision
	}
	rules, err := st.Rules(app)
	for _, r := range rules {
		ap.rules[r.Tool] = r.Decision
	}
	return ap, err
}

// writePolicy queues on the app's store jobs write (nil: none) and a read
// of the app's decisions, applied in a step that then calls then (if set)
// with write's error. A failed read applies change instead (if write
// succeeded): the peer never keeps a decision the store dropped. The
// channel gets write's error or ErrClosed; nil when the jobs are closed.
func (p *peer) writePolicy(write func() error, change func(ap *appPolicy), then func(error)) <-chan error {
	done := make(chan error, 1)
	queued := p.jobs.post(func() {
		var err error
		if write != nil {
			err = write()
		}
		ap, rerr := readPolicy(p.m.store, p.id)
		if rerr != nil {
			p.m.log.Error("read the app's decisions back: its own change is applied", zap.String("app", p.id), zap.Error(rerr))
		}
		if !p.run(func() {
			switch {
			case rerr == nil:
				p.choices = ap
			case err == nil && change != nil:
				change(&p.choices)
			}
			if then != nil {
				then(err)
			}
		}) {
			err = ErrClosed
		}
		done <- err
	})
	if !queued {
		return nil
	}
	return done
}

// Consents lists the persisted decisions (op consent, action list).
func (m *Manager) Consents() ([]policy.Consent, error) { return m.store.Consents() }

// RevokeConsent forgets an app's decision (op consent, action revoke): its
// next request asks again. found: there was one.
func (m *Manager) RevokeConsent(app string) (found bool, err error) {
	found, err = m.store.RevokeConsent(app)
	if err != nil {
		return false, err
	}
	return found, m.revoked([]string{app}, func(ap *appPolicy, _ string) { ap.consent = "" })
}

// Rules lists the standing tool rules of app ("" for all).
func (m *Manager) Rules(app string) ([]policy.Rule, error) { return m.store.Rules(app) }

// RevokeRules forgets app's standing rule for tool (all of app's when
// ""), so its next host-confirmed call asks, and returns the rules removed.
func (m *Manager) RevokeRules(app, tool string) ([]policy.Rule, error) {
	rules, err := m.store.RevokeRules(app, tool)
	if err != nil {
		return nil, err
	}
	var apps []string
	for _, r := range rules {
		if !slices.Contains(apps, r.App) {
			apps = append(apps, r.App)
		}
	}
	return rules, m.revoked(apps, func(ap *appPolicy, id string) {
		for _, r := range rules {
			if r.App == id {
				delete(ap.rules, r.Tool)
			}
		}
	})
}

// revoked follows a store revoke for apps: forget changes what New kept
// for an app with no peer, and each peer reads its decisions back on its
// store jobs, after any older write (so none undoes the revoke). It waits
// for every read-back, so a stalled store stalls its own app's revoke; a
// closed Manager is no error.
func (m *Manager) revoked(apps []string, forget func(ap *appPolicy, app string)) error {
	var peers []*peer
	m.mu.Lock()
	for _, id := range apps {
		if p := m.peers[id]; p != nil {
			peers = append(peers, p)
		} else if ap, ok := m.kept[id]; ok {
			forget(&ap, id)
			m.kept[id] = ap
		}
	}
	m.mu.Unlock()
	var waits []<-chan error
	for _, p := range peers {
		if done := p.writePolicy(nil, func(ap *appPolicy) { forget(ap, p.id) }, nil); done != nil {
			waits = append(waits, done)
		}
	}
	for _, done := range waits {
		if err := <-done; err != nil && err != ErrClosed {
			return err
		}
	}
	return nil
}
