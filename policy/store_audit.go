package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
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
// keep <= 0). The caller batches: the trim is one cursor step when
// nothing is beyond keep, and otherwise deletes as many entries as the
// batch added.
func (s *Store) AppendAudit(entries []AuditEntry, keep int) error {
	if len(entries) == 0 {
		return nil
	}
	if keep <= 0 {
		keep = DefaultAuditKeep
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		// Keys only ever grow: full pages, not half-full ones that
		// would later take inserts, halve the pages a batch writes.
		b.FillPercent = 1
		var last uint64
		buf := make([]byte, 0, 512)
		for i := range entries {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			entries[i].Seq = seq
			buf = appendAuditEntry(buf[:0], &entries[i])
			// bbolt keeps the value until the transaction ends.
			if err := b.Put(u64(seq), bytes.Clone(buf)); err != nil {
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

// appendAuditEntry appends e as json.Marshal writes it, without its
// reflection for the usual entry (plain strings, a time and a duration
// json.Marshal writes plainly); any other goes through json.Marshal.
func appendAuditEntry(b []byte, e *AuditEntry) []byte {
	plain := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	}
	d := math.Abs(e.DurationMS)
	if y := e.Started.Year(); y < 0 || y > 9999 || (d != 0 && (d < 1e-6 || d >= 1e21)) || math.IsNaN(d) ||
		!plain(e.App) || !plain(e.Tool) || !plain(e.CallID) || !plain(e.Risk) || !plain(e.Confirm) ||
		!plain(e.Decision) || !plain(e.Approved) || !plain(e.Outcome) || !plain(e.Error) || !plain(e.End) ||
		!plain(e.Account) || !plain(e.ContextID) || !plain(e.Caller) {
		data, err := json.Marshal(e)
		if err != nil {
			// Only a NaN or a year past 9999 gets here; neither is an
			// entry the daemon makes.
			data, _ = json.Marshal(AuditEntry{Seq: e.Seq, App: e.App, Tool: e.Tool, CallID: e.CallID, Outcome: e.Outcome, End: e.End})
		}
		return append(b, data...)
	}
	str := func(key, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':', '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	str("app", e.App, false)
	str("tool", e.Tool, false)
	str("call_id", e.CallID, false)
	str("risk", e.Risk, false)
	str("confirm", e.Confirm, false)
	str("decision", e.Decision, false)
	str("approved", e.Approved, true)
	str("outcome", e.Outcome, false)
	str("error", e.Error, true)
	str("end", e.End, false)
	str("account", e.Account, true)
	str("context_id", e.ContextID, true)
	str("caller", e.Caller, true)
	b = append(b, `,"started":"`...)
	b = e.Started.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","duration_ms":`...)
	b = strconv.AppendFloat(b, e.DurationMS, 'f', -1, 64)
	return append(b, '}')
}
