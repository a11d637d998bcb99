package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
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

// OpenSession returns the app's session with that account and title, or
// creates one. An empty title always creates a new session. Titled
// sessions are found through an index, not a scan.
func (s *Store) OpenSession(app, account, title string, now time.Time) (Session, error) {
	var out Session
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		idx := tx.Bucket(bucketTitles)
		key := sessionKey(app, account, title)
		if title != "" {
			if id := idx.Get(key); id != nil {
				v := b.Get(id)
				if v == nil {
					return fmt.Errorf("index names session %x, which is missing", id)
				}
				if err := json.Unmarshal(v, &out); err != nil {
					return fmt.Errorf("session %x: %w", id, err)
				}
				return nil
			}
		}
		id, err := b.NextSequence()
		if err != nil {
			return err
		}
		out = Session{ID: id, App: app, Account: account, Title: title, Created: now.UTC()}
		if title != "" {
			if err := idx.Put(key, u64(id)); err != nil {
				return err
			}
		}
		return putJSON(b, u64(id), out)
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

// AppendTurn adds a finished turn to a session's history.
func (s *Store) AppendTurn(session uint64, t Turn) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get(u64(session)) == nil {
			return fmt.Errorf("no session %d", session)
		}
		b, err := tx.Bucket(bucketTurns).CreateBucketIfNotExists(u64(session))
		if err != nil {
			return err
		}
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		return putJSON(b, u64(seq), t)
	})
	if err != nil {
		return fmt.Errorf("append turn %s to session %d: %w", t.TurnID, session, err)
	}
	return nil
}

// Turns returns a session's history, oldest first.
func (s *Store) Turns(session uint64) ([]Turn, error) {
	out := []Turn{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns).Bucket(u64(session))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var t Turn
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("turn %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read history of session %d: %w", session, err)
	}
	return out, nil
}
