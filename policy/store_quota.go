package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// What the store counts of each app so that Limits hold without a scan,
// kept in the same transactions as the records they count:
//
//	untitled     accountKey(app, account) + id -> ""   untitled sessions, oldest first per account
//	untitled_app appKey(app) + id -> ""                untitled sessions, oldest first per app
//	session_counts accountKey(app, account) -> count   sessions, titled or not
//	app_bytes    appKey(app) -> bytes                  sessionCost + turnCost of all its records
//
// appKey and accountKey are length-prefixed, so no app's (or account's)
// key range holds another's keys.
var (
	bucketUntitled    = []byte("untitled")
	bucketUntitledApp = []byte("untitled_app")
	bucketCounts      = []byte("session_counts")
	bucketBytes       = []byte("app_bytes")
)

// turnsOverhead is what a session's bucket of turns takes in the turns
// bucket (its key and bucket header), charged with the session.
const turnsOverhead = 8 + 16

func appKey(app string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(app)))
	return append(k, app...)
}

func accountKey(app, account string) []byte { return sessionKey(app, account, "") }

// sessionCost is what a session's record and its index entries take: the
// bytes counted against Limits.Bytes. It depends on the stored value
// only, which is never rewritten, so the same cost is refunded when the
// session goes.
func sessionCost(se Session, valueLen int) int64 {
	n := 8 + valueLen + turnsOverhead
	if se.Title != "" {
		n += len(sessionKey(se.App, se.Account, se.Title)) + 8
	} else {
		n += len(accountKey(se.App, se.Account)) + 8 + len(appKey(se.App)) + 8
	}
	return int64(n)
}

// turnCost is what one stored turn takes: its key and value.
func turnCost(valueLen int) int64 { return int64(8 + valueLen) }

// quota is the buckets of one write transaction.
type quota struct {
	sessions, titles, turns              *bolt.Bucket
	untitled, untitledApp, counts, bytes *bolt.Bucket
}

func quotaOf(tx *bolt.Tx) *quota {
	return &quota{
		sessions: tx.Bucket(bucketSessions), titles: tx.Bucket(bucketTitles), turns: tx.Bucket(bucketTurns),
		untitled: tx.Bucket(bucketUntitled), untitledApp: tx.Bucket(bucketUntitledApp),
		counts: tx.Bucket(bucketCounts), bytes: tx.Bucket(bucketBytes),
	}
}

func (q *quota) get(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// add moves a counter by d, never below 0; a counter at 0 is deleted.
func (q *quota) add(b *bolt.Bucket, k []byte, d int64) error {
	n := int64(q.get(b, k)) + d
	if n <= 0 {
		return b.Delete(k)
	}
	return b.Put(k, u64(uint64(n)))
}

func withID(prefix []byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(prefix), id)
}

// addSession writes a new session (its JSON val) with its index entries
// and counts.
func (q *quota) addSession(se Session, val []byte) error {
	sk := u64(se.ID)
	ak, pk := appKey(se.App), accountKey(se.App, se.Account)
	if err := q.sessions.Put(sk, val); err != nil {
		return err
	}
	if se.Title != "" {
		if err := q.titles.Put(sessionKey(se.App, se.Account, se.Title), sk); err != nil {
			return err
		}
	} else {
		if err := q.untitled.Put(withID(pk, se.ID), nil); err != nil {
			return err
		}
		if err := q.untitledApp.Put(withID(ak, se.ID), nil); err != nil {
			return err
		}
	}
	if err := q.add(q.counts, pk, 1); err != nil {
		return err
	}
	return q.add(q.bytes, ak, sessionCost(se, len(val)))
}

// evictOldest deletes the oldest untitled session of an index's prefix
// range (one account's, or one app's) that is not except and not busy,
// with its turns. It reports whether there was one.
func (q *quota) evictOldest(idx *bolt.Bucket, prefix []byte, except uint64, busy Busy) (bool, error) {
	c := idx.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) != len(prefix)+8 {
			continue
		}
		id := binary.BigEndian.Uint64(k[len(prefix):])
		if id == except || (busy != nil && busy(id)) {
			continue
		}
		// One whose record cannot be read (its identity and cost are in
		// it) is passed over, and keeps its place: the next is evicted.
		if err := q.deleteSession(id); !errors.Is(err, errUnreadableSession) {
			return true, err
		}
	}
	return false, nil
}

// errUnreadableSession is a session record that does not decode: a
// value damaged where the store's check does not look.
var errUnreadableSession = errors.New("its record cannot be read")

// deleteSession removes a session, its turns and its index entries, and
// refunds its counts.
func (q *quota) deleteSession(id uint64) error {
	sk := u64(id)
	v := q.sessions.Get(sk)
	if v == nil {
		return fmt.Errorf("evict session %d: %w", id, ErrNoSession)
	}
	var se Session
	if err := json.Unmarshal(v, &se); err != nil {
		return fmt.Errorf("evict session %d: %w: %w", id, errUnreadableSession, err)
	}
	cost := sessionCost(se, len(v))
	if tb := q.turns.Bucket(sk); tb != nil {
		err := tb.ForEach(func(_, tv []byte) error {
			cost += turnCost(len(tv))
			return nil
		})
		if err != nil {
			return err
		}
		if err := q.turns.DeleteBucket(sk); err != nil {
			return err
		}
	}
	if err := q.sessions.Delete(sk); err != nil {
		return err
	}
	ak, pk := appKey(se.App), accountKey(se.App, se.Account)
	if se.Title != "" {
		tk := sessionKey(se.App, se.Account, se.Title)
		if bytes.Equal(q.titles.Get(tk), sk) {
			if err := q.titles.Delete(tk); err != nil {
				return err
			}
		}
	} else {
		if err := q.untitled.Delete(withID(pk, id)); err != nil {
			return err
		}
		if err := q.untitledApp.Delete(withID(ak, id)); err != nil {
			return err
		}
	}
	if err := q.add(q.counts, pk, -1); err != nil {
		return err
	}
	return q.add(q.bytes, ak, -cost)
}

// turnsCost is the cost of n turns of b from key first on.
func (q *quota) turnsCost(b *bolt.Bucket, first, n uint64) int64 {
	var cost int64
	if n == 0 {
		return 0
	}
	c := b.Cursor()
	for k, v := c.Seek(u64(first)); k != nil && n > 0; k, v = c.Next() {
		cost += turnCost(len(v))
		n--
	}
	return cost
}

// indexQuota builds the untitled indexes and the counts of a state file
// written before them, from its sessions and turns (once, at open).
func indexQuota(tx *bolt.Tx) error {
	q := quotaOf(tx)
	return q.sessions.ForEach(func(k, v []byte) error {
		var se Session
		if err := json.Unmarshal(v, &se); err != nil {
			return fmt.Errorf("count session %x: %w", k, err)
		}
		id := binary.BigEndian.Uint64(k)
		ak, pk := appKey(se.App), accountKey(se.App, se.Account)
		cost := sessionCost(se, len(v))
		if tb := q.turns.Bucket(k); tb != nil {
			err := tb.ForEach(func(_, tv []byte) error {
				cost += turnCost(len(tv))
				return nil
			})
			if err != nil {
				return err
			}
		}
		if se.Title == "" {
			if err := q.untitled.Put(withID(pk, id), nil); err != nil {
				return err
			}
			if err := q.untitledApp.Put(withID(ak, id), nil); err != nil {
				return err
			}
		}
		if err := q.add(q.counts, pk, 1); err != nil {
			return err
		}
		return q.add(q.bytes, ak, cost)
	})
}
