package policy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrStateInUse is returned by OpenStoreWith when another process (normally a
// second octosupd of the same user) holds the state file's lock.
var ErrStateInUse = errors.New("state is in use by another octosupd")

// StoreFile is the name of the state database under Dirs.State.
const StoreFile = "state.db"

// lockWait bounds how long OpenStoreWith waits for another daemon to let go of
// the state file before it gives up with ErrStateInUse.
const lockWait = 2 * time.Second

// Buckets of the store. rules and audit are created empty here so that the
// tool-call layer (standing approval rules, the audit trail) finds them in
// every state file, including ones written before it existed.
var (
	bucketMeta     = []byte("meta")
	bucketConsent  = []byte("consent")  // app id -> Consent JSON
	bucketSessions = []byte("sessions") // session id (8-byte big endian) -> Session JSON
	bucketTitles   = []byte("titles")   // sessionKey(app, account, title) -> session id
	bucketTurns    = []byte("turns")    // session id -> nested bucket: turn seq -> Turn JSON
	bucketRules    = []byte("rules")    // standing tool rules (store_rules.go)
	bucketAudit    = []byte("audit")    // the tool-call audit trail (store_audit.go)
	// and the buckets of store_quota.go, which count what each app holds.
)

const schemaVersion = 1

// Store is octosup's persistent state: first-use consent, sessions and
// their history (and, for the tool-call layer, standing rules and the
// audit trail). It is a bbolt file whose every write transaction is
// fsync'd before it returns, so a decision the store confirmed survives
// the daemon being killed at any moment. Next to it is the last good
// copy (state.db.good), rewritten after each consent or rule change,
// which OpenStoreWith restores from when the file is damaged.
//
// A Store is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	now  func() time.Time

	// good is the good copy's path; "" for a temporary store, which
	// writes none. Its writer (store_backup.go) is guarded by bmu.
	good     string
	bmu      sync.Mutex
	brunning bool // a writer goroutine is on its way
	bpending bool // a change came while it wrote: one more copy
	bclosed  bool
	bwg      sync.WaitGroup

	closeOnce sync.Once

	hmu    sync.Mutex
	health Health
}

// init makes sure every bucket and the schema mark are there, writing
// only when one is missing: a store whose disk is full still opens.
func (s *Store) init() error {
	ready := false
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		v := tx.Bucket(bucketMeta).Get([]byte("schema"))
		if v == nil {
			return nil
		}
		ready = true
		return checkSchema(v)
	})
	if err != nil || ready {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		indexed := tx.Bucket(bucketTitles) != nil
		counted := tx.Bucket(bucketBytes) != nil
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		if !indexed {
			// A state file from before the index: index its sessions once.
			if err := indexSessions(tx); err != nil {
				return err
			}
		}
		if !counted {
			// A state file from before the limits: count what each
			// app holds, once.
			if err := indexQuota(tx); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get([]byte("schema")); v != nil {
			return checkSchema(v)
		}
		return meta.Put([]byte("schema"), u64(schemaVersion))
	})
}

// allBuckets are the top-level buckets every state file has after init.
var allBuckets = [][]byte{bucketMeta, bucketConsent, bucketSessions, bucketTitles, bucketTurns, bucketRules, bucketAudit,
	bucketUntitled, bucketUntitledApp, bucketCounts, bucketBytes}

func checkSchema(v []byte) error {
	if len(v) != 8 || binary.BigEndian.Uint64(v) != schemaVersion {
		return fmt.Errorf("state schema %x is not %d: this state file was written by another octosupd version", v, schemaVersion)
	}
	return nil
}

// Path is the file the store runs on: the state file, or a temporary one
// when Health().Temporary says why.
func (s *Store) Path() string { return s.path }

// Close writes the good copy if a change is waiting for it, then
// releases the file and its lock; a temporary store's file is removed.
// A second Close does nothing.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.stopBackups()
		err = s.db.Close()
		if s.Health().Temporary != "" {
			if rerr := os.Remove(s.path); err == nil && rerr != nil {
				err = fmt.Errorf("remove the temporary state %s: %w", s.path, rerr)
			}
		}
	})
	return err
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}
