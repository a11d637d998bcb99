package peer

import (
	"slices"

	"go.uber.org/zap"

	"octosup/policy"
)

// Consent and standing rules: read from the store once, when the Manager
// starts (loadPolicy), and kept by each app's peer (its consent and
// rules) so that every check is a lookup. Each write of them goes to the
// store first and is then read back into the peer on the app's store
// jobs (writePolicy): per app, the store and the peer see the writes in
// one order, and the peer holds what the store held after the last, so a
// revoke cannot be undone by an approve that wrote before it.

// appPolicy is what the store keeps of an app's decisions: its consent
// ("" never asked) and its standing rules by tool.
type appPolicy struct {
	consent policy.Decision
	rules   map[string]policy.Decision
}

// loadPolicy reads every app's consent and standing rules. An error
// leaves the Manager refusing every request that needs a consent
// (internal) until it is restarted: asking again someone who denied is
// not the daemon's call.
func loadPolicy(st *policy.Store) (map[string]appPolicy, error) {
	kept := map[string]appPolicy{}
	consents, err := st.Consents()
	if err != nil {
		return kept, err
	}
	for _, c := range consents {
		ap := kept[c.App]
		ap.consent = c.Decision
		kept[c.App] = ap
	}
	rules, err := st.Rules("")
	for _, r := range rules {
		ap := kept[r.App]
		if ap.rules == nil {
			ap.rules = map[string]policy.Decision{}
		}
		ap.rules[r.Tool] = r.Decision
		kept[r.App] = ap
	}
	return kept, err
}

// readPolicy reads one app's consent and rules.
func readPolicy(st *policy.Store, app string) (appPolicy, error) {
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

// writePolicy runs write (a store write of the app's consent or rules;
// nil: none) on the app's store jobs, reads the app's decisions back,
// and applies them to the peer, then calls then (when set) with write's
// error, in one step. It returns write's error, or ErrClosed.
func (p *peer) writePolicy(write func() error, then func(error)) error {
	done := make(chan error, 1)
	queued := p.store(func() {
		var err error
		if write != nil {
			err = write()
		}
		ap, rerr := readPolicy(p.m.store, p.id)
		if rerr != nil {
			p.m.log.Error("read the app's decisions back: it keeps the ones from before", zap.String("app", p.id), zap.Error(rerr))
		}
		if !p.run(func() {
			if rerr == nil {
				p.consent, p.rules = ap.consent, ap.rules
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
		return ErrClosed
	}
	return <-done
}

// Consents lists the persisted decisions (op consent, action list).
func (m *Manager) Consents() ([]policy.Consent, error) { return m.store.Consents() }

// RevokeConsent forgets an app's decision (op consent, action revoke): its
// next request asks again. found reports whether there was one.
func (m *Manager) RevokeConsent(app string) (found bool, err error) {
	found, err = m.store.RevokeConsent(app)
	if err != nil {
		return false, err
	}
	return found, m.revoked([]string{app}, func(ap *appPolicy, _ string) { ap.consent = "" })
}

// Rules lists the standing tool rules of app ("" for all).
func (m *Manager) Rules(app string) ([]policy.Rule, error) { return m.store.Rules(app) }

// RevokeRules forgets app's standing rule for tool (every rule of app when
// tool is ""; of every app when app is ""): its next host-confirmed call
// asks the person again. It returns the rules removed.
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

// revoked follows a revoke the store has made for apps: what New kept
// for one without a peer is changed by forget, and each peer reads its
// decisions back on its store jobs, after any write queued there before
// (an approve's): so a revoke is never undone by an older write.
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
	for _, p := range peers {
		if err := p.writePolicy(nil, nil); err != nil {
			return err
		}
	}
	return nil
}
