package policy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrStateInUse is returned by OpenStore when another process (normally a
// second octosupd of the same user) holds the state file's lock.
var ErrStateInUse = errors.New("state is in use by another octosupd")

// StoreFile is the name of the state database under Dirs.State.
const StoreFile = "state.db"

// lockWait bounds how long OpenStore waits for another daemon to let go of
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
	bucketRules    = []byte("rules")    // reserved: standing tool rules
	bucketAudit    = []byte("audit")    // reserved: tool-call audit trail
	// and the buckets of store_quota.go, which count what each app holds.
)

const schemaVersion = 1

// Store is octosup's persistent state: first-use consent, sessions and
// their history (and, for the tool-call layer, standing rules and the
// audit trail). It is a bbolt file whose every write transaction is
// fsync'd before it returns, so a decision the store confirmed survives
// the daemon being killed at any moment.
//
// A Store is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
}

// OpenStore opens (creating if needed, with its directory 0700) the state
// file at path. A file locked by another process is ErrStateInUse after a
// short wait.
func OpenStore(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open state %s: %w (stop the other daemon, or give this one another XDG_STATE_HOME)", path, ErrStateInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	s := &Store{db: db, path: path}
	if err := s.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) init() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		indexed := tx.Bucket(bucketTitles) != nil
		counted := tx.Bucket(bucketBytes) != nil
		for _, b := range [][]byte{bucketMeta, bucketConsent, bucketSessions, bucketTitles, bucketTurns, bucketRules, bucketAudit,
			bucketUntitled, bucketUntitledApp, bucketCounts, bucketBytes} {
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
			if len(v) != 8 || binary.BigEndian.Uint64(v) != schemaVersion {
				return fmt.Errorf("state schema %x is not %d: this state file was written by another octosupd version", v, schemaVersion)
			}
			return nil
		}
		return meta.Put([]byte("schema"), u64(schemaVersion))
	})
}

// Path is the state file.
func (s *Store) Path() string { return s.path }

// Close releases the file and its lock.
func (s *Store) Close() error { return s.db.Close() }

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
