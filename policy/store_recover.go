package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// GoodCopySuffix names the last good copy of the state file: state.db.good
// next to state.db. It is the whole database as of the last consent or
// rule change (bbolt's Tx.WriteTo, then an atomic rename).
const GoodCopySuffix = ".good"

// CorruptSuffix starts the name a damaged state file is moved to, followed
// by the time: state.db.corrupt-20260102T030405Z.
const CorruptSuffix = ".corrupt-"

// StoreConfig is what OpenStoreWith needs; only Path is required.
type StoreConfig struct {
	// Path is the state file (Dirs.State/StoreFile).
	Path string
	// Scratch is a private directory (the daemon's runtime directory)
	// for a store that lasts one run, used when the state file can be
	// neither written nor replaced. "" means there is none: such a
	// state file is then an error.
	Scratch string
	// Now stamps what the store records about itself (the name of a
	// file moved aside); nil means time.Now.
	Now func() time.Time
}

// OpenStoreWith opens (creating it if needed, with its directory 0700)
// the state file, so that a bad file never keeps the daemon from
// starting:
//
//   - A file that is not a whole database (checkStore: a garbage header,
//     truncated, a page the tree does not expect, empty) is moved aside
//     to state.db.corrupt-<time> and kept. The store is then restored
//     from the last good copy (state.db.good) if that one checks, or
//     starts empty: nothing granted, every consent asked again.
//   - A file that cannot be read, written or moved aside (a read-only
//     directory or file system, a permission) is left as it is, and the
//     store runs on a new file in cfg.Scratch for this run, started from
//     a copy of the state file if it checks, else of the good copy if
//     that one does, else empty.
//
// Health says which happened. Another process holding the file is
// ErrStateInUse after a short wait, as before; so is one holding the
// state directory's lock (a second daemon starting at the same moment).
func OpenStoreWith(cfg StoreConfig) (*Store, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	path := cfg.Path
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return scratchStore(cfg, nil, fmt.Sprintf("create %s: %s", dir, errText(err)), "", err)
	}
	unlock, err := lockDir(dir)
	switch {
	case errors.Is(err, ErrStateInUse):
		return nil, fmt.Errorf("open state %s: %w", path, err)
	case err != nil:
		return scratchStore(cfg, nil, fmt.Sprintf("%s cannot be locked: %s", dir, errText(err)), "", err)
	}
	defer unlock()

	err = checkStore(path)
	var damaged *DamagedError
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		s, oerr := openStore(cfg, path, nil, nil)
		if oerr != nil && openedFile(oerr) {
			seed := ""
			if err == nil {
				seed = path
			}
			return scratchStore(cfg, nil, fmt.Sprintf("%s cannot be written: %s", StoreFile, errText(oerr)), seed, oerr)
		}
		return s, oerr
	case errors.Is(err, ErrStateInUse):
		return nil, fmt.Errorf("open state %s: %w (stop the other daemon, or give this one another XDG_STATE_HOME)", path, ErrStateInUse)
	case !errors.As(err, &damaged):
		// Unreadable (a permission): nothing to move, nothing to read.
		return scratchStore(cfg, nil, fmt.Sprintf("%s cannot be read: %s", StoreFile, errText(err)), "", err)
	}

	dmg := &Damage{At: cfg.Now().UTC(), Problem: damaged.Problem}
	moved, err := moveAside(path, dmg.At)
	if err != nil {
		dmg.MoveError = errText(err)
		return scratchStore(cfg, dmg, fmt.Sprintf("%s could not be moved aside", StoreFile), "", err)
	}
	dmg.MovedTo = moved
	restored := restoreGoodCopy(path+GoodCopySuffix, path)
	s, err := openStore(cfg, path, dmg, restored)
	if err != nil && openedFile(err) {
		return scratchStore(cfg, dmg, fmt.Sprintf("%s cannot be written: %s", StoreFile, errText(err)), "", err)
	}
	return s, err
}

// restoreGoodCopy copies the good copy at good to path if it checks, and
// says what path now holds.
func restoreGoodCopy(good, path string) *Restored {
	at, err := goodCopy(good)
	if err != nil {
		return &Restored{Problem: err.Error()}
	}
	if err := copyFile(good, path); err != nil {
		return &Restored{Problem: fmt.Sprintf("copy %s: %s", filepath.Base(good), errText(err))}
	}
	return &Restored{From: good, At: at}
}

// goodCopy checks the good copy at path and returns when it was written.
func goodCopy(path string) (time.Time, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, fmt.Errorf("there is no %s", filepath.Base(path))
	}
	if err != nil {
		return time.Time{}, err
	}
	var damaged *DamagedError
	if err := checkStore(path); errors.As(err, &damaged) {
		return time.Time{}, fmt.Errorf("%s is damaged too (%s)", filepath.Base(path), damaged.Problem)
	} else if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// scratchStore is the store of a run whose state file cannot be used in
// place (why, for a person; err, the cause): a new file in cfg.Scratch,
// removed at Close, started from a copy of seed when it is given, else
// of the good copy when that one checks, else empty.
func scratchStore(cfg StoreConfig, dmg *Damage, why, seed string, err error) (*Store, error) {
	fail := func(more error) (*Store, error) {
		if more == nil {
			return nil, fmt.Errorf("open state %s: %w", cfg.Path, err)
		}
		return nil, fmt.Errorf("open state %s: %w; and no store for this run either: %w", cfg.Path, err, more)
	}
	if cfg.Scratch == "" {
		return fail(nil)
	}
	if err := EnsurePrivateDir(cfg.Scratch); err != nil {
		return fail(err)
	}
	f, ferr := os.CreateTemp(cfg.Scratch, "state-*.db")
	if ferr != nil {
		return fail(ferr)
	}
	tmp := f.Name()
	f.Close()
	var restored *Restored
	if seed != "" {
		restored = &Restored{From: seed}
		if fi, err := os.Stat(seed); err == nil {
			restored.At = fi.ModTime()
		}
		if err := copyFile(seed, tmp); err != nil {
			restored = &Restored{Problem: fmt.Sprintf("copy %s: %s", filepath.Base(seed), errText(err))}
		}
	} else {
		restored = restoreGoodCopy(cfg.Path+GoodCopySuffix, tmp)
	}
	if restored.From == "" {
		// An empty file is a new database to bbolt.
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			os.Remove(tmp)
			return fail(err)
		}
	}
	s, oerr := openStore(cfg, tmp, dmg, restored)
	if oerr != nil {
		os.Remove(tmp)
		return fail(oerr)
	}
	s.health.Temporary = why
	return s, nil
}

// moveAside renames the damaged file at path to path.corrupt-<at>, a name
// not yet taken (-2, -3, ... after it when it is).
func moveAside(path string, at time.Time) (string, error) {
	base := path + CorruptSuffix + at.UTC().Format("20060102T150405Z")
	to := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(to); err != nil {
			break // free, or Rename says why not
		}
		to = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", err
	}
	// The move is done: a directory that does not sync only makes it
	// less durable, and the check finds the damage again next time.
	syncDir(filepath.Dir(path))
	return to, nil
}

// copyFile writes a copy of from at to, whole or not at all: into a
// temporary file, fsync'd, then renamed over to.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	return writeAtomic(to, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
}

// writeAtomic writes path through write, whole or not at all: into
// path.tmp (0600), fsync'd, renamed over path, the directory fsync'd.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockDir takes the state directory's lock (flock on the directory
// itself), waiting up to lockWait: the check, the move aside and the
// restore of one daemon are done before another one looks at the file.
// bbolt's own lock on the file cannot do it: the file it locks is the
// one being replaced.
func lockDir(dir string) (unlock func(), err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			unix.Close(fd)
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w (stop the other daemon, or give this one another XDG_STATE_HOME)", ErrStateInUse)
			}
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		// flock has no way to wait with a deadline but to poll (bbolt
		// polls the same way for its file's lock).
		time.Sleep(50 * time.Millisecond)
	}
}

// openStore opens the checked (or absent) state file at path
// read-write. A store on the state file itself (not a temporary one,
// whose good copy would be of this run only) writes its good copy after
// each consent or rule change, and at once when it has none.
func openStore(cfg StoreConfig, path string, dmg *Damage, restored *Restored) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("open state %s: %w (stop the other daemon, or give this one another XDG_STATE_HOME)", path, ErrStateInUse)
	case err != nil && openedFile(err):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	s := &Store{db: db, path: path, now: cfg.Now}
	s.health = Health{Path: path, Damage: dmg, Restored: restored}
	if err := s.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		s.health.Unreadable = unreadableDecisions(tx)
		return nil
	})
	if path == cfg.Path {
		s.good = path + GoodCopySuffix
		if _, err := os.Lstat(s.good); errors.Is(err, fs.ErrNotExist) {
			s.backupSoon()
		}
	}
	return s, nil
}
