package peer

import (
	"time"

	"octosup/policy"
)

// Store keeps the peer link's consent, standing rules, sessions, turns
// and audit trail on disk: a *policy.Store (tests wrap one).
type Store interface {
	Consent(app string) (policy.Consent, bool, error)
	Consents() ([]policy.Consent, error)
	SetConsent(c policy.Consent) error
	RevokeConsent(app string) (bool, error)
	Rules(app string) ([]policy.Rule, error)
	SetRule(r policy.Rule) error
	RevokeRules(app, tool string) ([]policy.Rule, error)
	OpenSession(app, account, title string, now time.Time, lim policy.Limits, busy policy.Busy) (policy.Session, error)
	AppendTurn(session uint64, t policy.Turn, lim policy.Limits, busy policy.Busy) error
	History(session uint64, fn func(turn []byte) bool) error
	TurnIDs(session uint64) ([]string, error)
	AppendAudit(entries []policy.AuditEntry, keep int) error
	Audit(app string, limit int) ([]policy.AuditEntry, error)
}
