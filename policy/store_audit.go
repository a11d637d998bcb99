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
// keep <= 0), so exactly the newest keep are left. The caller batches:
// the trim is one seek and a step per entry it drops (as many as the
// batch added, once the trail is full), whatever the batch's size.
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
		// bbolt keeps a value (it copies the key) until the
		// transaction ends: the batch's values share one array, one
		// allocation, each its own part of it. An append that outgrows
		// the array moves on to a new one and leaves the values before
		// it in the old one, untouched.
		vals := make([]byte, 0, len(entries)*auditEntrySize)
		var key [8]byte
		for i := range entries {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			entries[i].Seq = seq
			n := len(vals)
			vals = appendAuditEntry(vals, &entries[i])
			binary.BigEndian.PutUint64(key[:], seq)
			if err := b.Put(key[:], vals[n:len(vals):len(vals)]); err != nil {
				return err
			}
			last = seq
		}
		if last <= uint64(keep) {
			return nil
		}
		return trimAudit(b.Cursor(), last-uint64(keep))
	})
	if err != nil {
		// The entries are lost (the trail must not hold the daemon
		// back): counted for status, not only logged by the caller.
		s.noteAuditDropped(len(entries), err)
		return fmt.Errorf("write %d audit entries: %w", len(entries), err)
	}
	return nil
}

// auditEntrySize is about what the usual entry takes encoded.
const auditEntrySize = 320

// trimAudit deletes the keys <= floor, newest first. Backwards because
// of how a bbolt cursor deletes: its leaf's later elements move down a
// place, so a Next after a Delete skips one, and a First after each
// Delete (the forward way that works) walks every leaf emptied so far
// again, since bbolt drops an emptied leaf only when the transaction
// commits. A Prev after a Delete lands on the element before the
// deleted one, which did not move: one pass, each step the next key.
func trimAudit(c *bolt.Cursor, floor uint64) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], floor+1)
	// The batch just written is past floor: Seek finds a key.
	if k, _ := c.Seek(key[:]); k == nil {
		return fmt.Errorf("trim the audit trail to entries past %d: no entry past it", floor)
	}
	for k, _ := c.Prev(); k != nil; k, _ = c.Prev() {
		if seq := binary.BigEndian.Uint64(k); seq > floor {
			return fmt.Errorf("trim the audit trail to entries past %d: the cursor went back to entry %d", floor, seq)
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Audit returns the last limit entries (every one when limit <= 0) of app
// ("" for every app), oldest first. An entry that does not decode (a
// value damaged where bbolt's check does not look) is left out and named
// in Health.Unreadable: one must not hide the rest of the trail.
func (s *Store) Audit(app string, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				s.noteUnreadable(fmt.Sprintf("audit entry %d cannot be read (%v): it is left out of the trail", binary.BigEndian.Uint64(k), err))
				continue
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

// appendAuditEntry appends e as json.Marshal writes it.
func appendAuditEntry(b []byte, e *AuditEntry) []byte {
	data, err := json.Marshal(e)
	if err != nil {
		// Only a NaN or a year past 9999 gets here; neither is an entry
		// the daemon makes.
		data, _ = json.Marshal(AuditEntry{Seq: e.Seq, App: e.App, Tool: e.Tool, CallID: e.CallID, Outcome: e.Outcome, End: e.End})
	}
	return append(b, data...)
}
