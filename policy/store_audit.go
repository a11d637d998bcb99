package policy

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultAuditKeep is how many audit entries the store keeps: older ones
// are dropped as new ones are written, so the trail has a bounded size.
const DefaultAuditKeep = 100_000

// Audit decisions: what let a call reach its app (or stopped it).
const (
	AuditDecisionNone  = "none"  // no host confirmation was asked for
	AuditDecisionRule  = "rule"  // a standing rule answered
	AuditDecisionSheet = "sheet" // the person answered (or did not) a sheet
)

// AuditEntry is one finished tool call.
type AuditEntry struct {
	Seq       uint64    `json:"seq"`
	App       string    `json:"app"`
	Tool      string    `json:"tool"`
	CallID    string    `json:"call_id"`
	Risk      string    `json:"risk"`
	Confirm   string    `json:"confirm"`
	Decision  string    `json:"decision"`           // none, rule, sheet
	Approved  string    `json:"approved,omitempty"` // allow or deny, when a rule or sheet answered
	Outcome   string    `json:"outcome"`            // ok, error, outcome_unknown
	Error     string    `json:"error,omitempty"`    // the error code of an error outcome
	End       string    `json:"end"`                // finished, cancelled, timed_out
	Account   string    `json:"account,omitempty"`
	ContextID string    `json:"context_id,omitempty"`
	Caller    string    `json:"caller,omitempty"`
	Started   time.Time `json:"started"`
	// DurationMS is from acceptance to the outcome, on the monotonic clock.
	DurationMS float64 `json:"duration_ms"`
}

// AppendAudit writes entries in one fsync'd transaction (their Seq is
// assigned here) and drops the oldest beyond keep (DefaultAuditKeep when
// keep <= 0).
func (s *Store) AppendAudit(entries []AuditEntry, keep int) error {
	if len(entries) == 0 {
		return nil
	}
	if keep <= 0 {
		keep = DefaultAuditKeep
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		var last uint64
		for i := range entries {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			entries[i].Seq = seq
			if err := putJSON(b, u64(seq), entries[i]); err != nil {
				return err
			}
			last = seq
		}
		if last <= uint64(keep) {
			return nil
		}
		floor := last - uint64(keep) // keys <= floor go
		c := b.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= floor; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d audit entries: %w", len(entries), err)
	}
	return nil
}

// Audit returns the last limit entries (every one when limit <= 0) of app
// ("" for every app), oldest first.
func (s *Store) Audit(app string, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("audit entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if app != "" && e.App != app {
				continue
			}
			out = append(out, e)
			if limit > 0 && len(out) == limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}
