package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Session is a conversation an app holds with the agent service. It
// outlives the contexts (live handles of one process) that use it: an app
// that opens a session with the title of an earlier one gets that one
// back, history and all.
type Session struct {
	ID      uint64    `json:"id"`
	App     string    `json:"app"`
	Account string    `json:"account,omitempty"`
	Title   string    `json:"title,omitempty"`
	Created time.Time `json:"created"`
}

// Turn is one finished exchange of a session: what the app sent and the
// events the kernel streamed back.
type Turn struct {
	TurnID    string            `json:"turn_id"`
	Input     json.RawMessage   `json:"input"`
	Events    []json.RawMessage `json:"events"`
	Truncated bool              `json:"truncated,omitempty"` // events beyond the daemon's cap were dropped
	End       string            `json:"end"`                 // completed, interrupted, context_closed, no_kernel, ...
	Started   time.Time         `json:"started"`
	Ended     time.Time         `json:"ended"`
}

// Limits bound what one app can make the store keep (the peer link's
// Config sets them; docs/protocol.md, "Limits"). A field <= 0 is no
// bound.
type Limits struct {
	// Sessions is the most sessions (titled or not) one app may hold
	// for one account.
	Sessions int
	// Turns is the most turns one session keeps: recording one more
	// drops the oldest.
	Turns int
	// Bytes is the most bytes of records (keys and values of its
	// sessions, their index entries and their turns) one app may hold.
	Bytes int64
}

// Busy reports whether a session has a live context (and so must not be
// evicted). nil: none has.
type Busy func(session uint64) bool

// ErrLimit is what a write that would pass one of the app's Limits is
// (errors.Is) when nothing could be evicted to make room; the error is a
// *LimitError, which says which limit.
var ErrLimit = errors.New("the app is at a limit of what the daemon stores for it")

// ErrNoSession: the session is not in the store (it never was, or it was
// evicted after its last context closed).
var ErrNoSession = errors.New("no such session")

// LimitError is a refused write: which limit, for which app (and account),
// and why nothing could make room.
type LimitError struct {
	App     string
	Account string
	Limit   string // "sessions", "bytes"
	Max     int64
	Reason  string
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "sessions":
		return fmt.Sprintf("app %s holds %d sessions for account %q, the most it may, and %s", e.App, e.Max, e.Account, e.Reason)
	default:
		return fmt.Sprintf("app %s would pass the %d bytes of history the daemon keeps for it, and %s", e.App, e.Max, e.Reason)
	}
}

// Is makes a *LimitError ErrLimit for errors.Is.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// nothingEvictable is the Reason of a LimitError when no session could
// be dropped.
const nothingEvictable = "none of its sessions is a closed untitled one the daemon could drop (titled sessions and sessions with an open context are kept): close a context, or reopen a session by its title instead of opening new ones"

// OpenSession returns the app's session with that account and title, or
// creates one. An empty title always creates a new session. Titled
// sessions are found through an index, not a scan.
//
// A new session must fit lim: when the app holds lim.Sessions for the
// account, or the new record would pass lim.Bytes, its oldest closed
// untitled sessions (those busy does not report, with their turns) are
// evicted first, in the same transaction; when that is not enough,
// nothing changes and the error is a *LimitError.
func (s *Store) OpenSession(app, account, title string, now time.Time, lim Limits, busy Busy) (Session, error) {
	var out Session
	err := s.db.Update(func(tx *bolt.Tx) error {
		q := quotaOf(tx)
		key := sessionKey(app, account, title)
		if title != "" {
			if id := q.titles.Get(key); id != nil {
				v := q.sessions.Get(id)
				if v == nil {
					return fmt.Errorf("index names session %x, which is missing", id)
				}
				// A record that cannot be read is passed over: the title
				// gets a new session (the index names it), and the old
				// record keeps its place and its cost.
				if json.Unmarshal(v, &out) == nil {
					return nil
				}
			}
		}
		id, err := q.sessions.NextSequence()
		if err != nil {
			return err
		}
		out = Session{ID: id, App: app, Account: account, Title: title, Created: now.UTC()}
		val, err := json.Marshal(out)
		if err != nil {
			return err
		}
		ak, pk := appKey(app), accountKey(app, account)
		for lim.Sessions > 0 && q.get(q.counts, pk) >= uint64(lim.Sessions) {
			ok, err := q.evictOldest(q.untitled, pk, 0, busy)
			if err != nil {
				return err
			}
			if !ok {
				return &LimitError{App: app, Account: account, Limit: "sessions", Max: int64(lim.Sessions), Reason: nothingEvictable}
			}
		}
		cost := sessionCost(out, len(val))
		for lim.Bytes > 0 && int64(q.get(q.bytes, ak))+cost > lim.Bytes {
			ok, err := q.evictOldest(q.untitledApp, ak, 0, busy)
			if err != nil {
				return err
			}
			if !ok {
				return &LimitError{App: app, Account: account, Limit: "bytes", Max: lim.Bytes, Reason: nothingEvictable}
			}
		}
		return q.addSession(out, val)
	})
	if err != nil {
		return Session{}, fmt.Errorf("open session for %s: %w", app, err)
	}
	return out, nil
}

// sessionKey is the index key of a titled session. Lengths prefix app and
// account so that no two triples share a key.
func sessionKey(app, account, title string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(app)))
	k = append(k, app...)
	k = binary.AppendUvarint(k, uint64(len(account)))
	k = append(k, account...)
	return append(k, title...)
}

// indexSessions builds the title index of a state file written before it
// (the first session of a triple wins, as the old scan found it).
func indexSessions(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketTitles)
	return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
		var se Session
		if err := json.Unmarshal(v, &se); err != nil {
			return fmt.Errorf("index session %x: %w", k, err)
		}
		key := sessionKey(se.App, se.Account, se.Title)
		if se.Title == "" || idx.Get(key) != nil {
			return nil
		}
		return idx.Put(key, bytes.Clone(k))
	})
}

// AppendTurn adds a finished turn to a session's history. The session
// keeps at most lim.Turns turns: its oldest beyond that are dropped in the
// same transaction. When the turn would take its app past lim.Bytes, the
// app's oldest closed untitled sessions (other than this one, and those
// busy does not report) are evicted, then the oldest turns of this
// session are dropped; when even that is not enough, nothing changes and
// the error is a *LimitError. A session that is gone is ErrNoSession.
func (s *Store) AppendTurn(session uint64, t Turn, lim Limits, busy Busy) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		q := quotaOf(tx)
		sk := u64(session)
		sv := q.sessions.Get(sk)
		if sv == nil {
			return ErrNoSession
		}
		var se Session
		if err := json.Unmarshal(sv, &se); err != nil {
			return fmt.Errorf("session %d: %w", session, err)
		}
		val, err := json.Marshal(t)
		if err != nil {
			return err
		}
		ak := appKey(se.App)
		cost := turnCost(len(val))
		if lim.Bytes > 0 && cost > lim.Bytes {
			return &LimitError{App: se.App, Account: se.Account, Limit: "bytes", Max: lim.Bytes,
				Reason: fmt.Sprintf("a turn of %d bytes is more than that alone", cost)}
		}
		tb, err := q.turns.CreateBucketIfNotExists(sk)
		if err != nil {
			return err
		}
		seq, err := tb.NextSequence()
		if err != nil {
			return err
		}
		// A session's turn keys are contiguous, first to seq-1: turns
		// are only ever dropped from the front.
		var first uint64
		held := uint64(0)
		if k, _ := tb.Cursor().First(); k != nil {
			first = binary.BigEndian.Uint64(k)
			held = seq - first
		}
		drop := uint64(0)
		if lim.Turns > 0 && held >= uint64(lim.Turns) {
			drop = held - uint64(lim.Turns) + 1
		}
		freed := q.turnsCost(tb, first, drop)
		over := func() bool { return lim.Bytes > 0 && int64(q.get(q.bytes, ak))-freed+cost > lim.Bytes }
		for over() {
			ok, err := q.evictOldest(q.untitledApp, ak, session, busy)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
		}
		for over() {
			if drop == held {
				return &LimitError{App: se.App, Account: se.Account, Limit: "bytes", Max: lim.Bytes, Reason: nothingEvictable}
			}
			freed += q.turnsCost(tb, first+drop, 1)
			drop++
		}
		for seq := first; seq < first+drop; seq++ {
			if err := tb.Delete(u64(seq)); err != nil {
				return err
			}
		}
		if err := tb.Put(u64(seq), val); err != nil {
			return err
		}
		return q.add(q.bytes, ak, cost-freed)
	})
	if err != nil {
		return fmt.Errorf("append turn %s to session %d: %w", t.TurnID, session, err)
	}
	return nil
}

// History hands fn a session's turns newest first, each the JSON of a
// Turn as stored (valid only during the call), until fn returns false or
// the oldest was handed: a reverse cursor, so a reader that stops early
// reads no more than it kept. A session without turns (or none at all)
// hands none.
func (s *Store) History(session uint64, fn func(turn []byte) bool) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns).Bucket(u64(session))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if !fn(v) {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read history of session %d: %w", session, err)
	}
	return nil
}

// Usage is what an app holds in the store, as its Limits count it.
type Usage struct {
	Sessions map[string]int // by account
	Bytes    int64
}

// Usage reads what app holds in the store, as its Limits count it.
func (s *Store) Usage(app string) (Usage, error) {
	u := Usage{Sessions: map[string]int{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		q := quotaOf(tx)
		ak := appKey(app)
		u.Bytes = int64(q.get(q.bytes, ak))
		c := q.counts.Cursor()
		for k, v := c.Seek(ak); k != nil && bytes.HasPrefix(k, ak); k, v = c.Next() {
			n, w := binary.Uvarint(k[len(ak):])
			if w <= 0 || uint64(len(k)-len(ak)-w) != n || len(v) != 8 {
				return fmt.Errorf("session count key %x is malformed", k)
			}
			u.Sessions[string(k[len(ak)+w:])] = int(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return Usage{}, fmt.Errorf("read the store usage of %s: %w", app, err)
	}
	return u, nil
}

// TurnIDs returns the turn_ids of a session's recorded turns, oldest
// first (at most the Limits.Turns the store keeps).
func (s *Store) TurnIDs(session uint64) ([]string, error) {
	var ids []string
	var err error
	herr := s.History(session, func(turn []byte) bool {
		var t struct {
			TurnID string `json:"turn_id"`
		}
		if err = json.Unmarshal(turn, &t); err != nil {
			return false
		}
		ids = append(ids, t.TurnID)
		return true
	})
	if herr != nil {
		return nil, herr
	}
	if err != nil {
		return nil, fmt.Errorf("read turn ids of session %d: %w", session, err)
	}
	slices.Reverse(ids)
	return ids, nil
}
