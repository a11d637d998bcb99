package peer

import (
	"sync"
	"time"

	"octosup/policy"
)

// gatedStore is a *policy.Store whose calls about an app first run gate
// with the app: a test's way to stall or fail one app's store. Calls by
// session are the app's that opened it (through this store).
type gatedStore struct {
	*policy.Store
	gate func(app string) error

	mu       sync.Mutex
	sessions map[uint64]string
}

func newGatedStore(st *policy.Store, gate func(app string) error) *gatedStore {
	return &gatedStore{Store: st, gate: gate, sessions: map[uint64]string{}}
}

func (g *gatedStore) of(session uint64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[session]
}

func (g *gatedStore) Consent(app string) (policy.Consent, bool, error) {
	if err := g.gate(app); err != nil {
		return policy.Consent{}, false, err
	}
	return g.Store.Consent(app)
}

func (g *gatedStore) SetConsent(c policy.Consent) error {
	if err := g.gate(c.App); err != nil {
		return err
	}
	return g.Store.SetConsent(c)
}

func (g *gatedStore) Rules(app string) ([]policy.Rule, error) {
	if err := g.gate(app); err != nil {
		return nil, err
	}
	return g.Store.Rules(app)
}

func (g *gatedStore) SetRule(r policy.Rule) error {
	if err := g.gate(r.App); err != nil {
		return err
	}
	return g.Store.SetRule(r)
}

func (g *gatedStore) OpenSession(app, account, title string, now time.Time, lim policy.Limits, busy policy.Busy) (policy.Session, error) {
	if err := g.gate(app); err != nil {
		return policy.Session{}, err
	}
	s, err := g.Store.OpenSession(app, account, title, now, lim, busy)
	if err == nil {
		g.mu.Lock()
		g.sessions[s.ID] = app
		g.mu.Unlock()
	}
	return s, err
}

func (g *gatedStore) AppendTurn(session uint64, t policy.Turn, lim policy.Limits, busy policy.Busy) error {
	if err := g.gate(g.of(session)); err != nil {
		return err
	}
	return g.Store.AppendTurn(session, t, lim, busy)
}

func (g *gatedStore) History(session uint64, fn func(turn []byte) bool) error {
	if err := g.gate(g.of(session)); err != nil {
		return err
	}
	return g.Store.History(session, fn)
}

func (g *gatedStore) TurnIDs(session uint64) ([]string, error) {
	if err := g.gate(g.of(session)); err != nil {
		return nil, err
	}
	return g.Store.TurnIDs(session)
}
