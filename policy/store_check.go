package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DamagedError is what checkStore says of a state file that is not a
// whole bbolt database: its header is garbage, it is shorter than its
// header says, one of its pages is not what the tree expects, or it is
// empty (bbolt writes four pages before a new file is used, so a file
// the daemon wrote is never empty).
type DamagedError struct {
	Path    string
	Problem string // what is wrong, e.g. "invalid database"
}

func (e *DamagedError) Error() string { return fmt.Sprintf("%s is damaged: %s", e.Path, e.Problem) }

// checkStore reads the whole state file at path, read-only, and says
// whether it is fit to open: nil (or an fs.ErrNotExist error when there
// is none), ErrStateInUse when another process holds it, a
// *DamagedError, or the error that kept it from being read (a
// permission, say).
//
// bbolt trusts its file: a page that is not what the tree expects makes
// it panic, and one past the end of the file or of its mapping makes the
// process fault (SIGBUS, SIGSEGV), at whatever read first meets it. So
// every page is read here once, on a goroutine that turns such a fault
// into a panic (debug.SetPanicOnFault) and that panic into the answer;
// after that, bbolt's own consistency check (Tx.Check) finds the rest
// (pages freed twice, or both freed and in use, which a later write
// would overwrite).
func checkStore(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return &DamagedError{Path: path, Problem: "the file is empty"}
	}
	done := make(chan error, 1)
	go func() { done <- checkStoreFaults(path, fi.Size()) }()
	return <-done
}

// checkStoreFaults is checkStore's reading of the file, on a goroutine
// of its own: a fault in it is a panic there (debug.SetPanicOnFault),
// and a panic is the answer that the file is damaged.
func checkStoreFaults(path string, size int64) (err error) {
	debug.SetPanicOnFault(true)
	c := &storeCheck{path: path, size: size}
	defer func() {
		if r := recover(); r != nil {
			err = c.damaged(r)
		}
	}()
	// First the header's size against the file's, and every page of the
	// tree, without the free list (whose page may lie past the end).
	if err := c.readTree(); err != nil {
		return err
	}
	// Then bbolt's check, with the free list read in Open, on this
	// goroutine, not in Check's own.
	return c.runCheck()
}

// storeCheck is checkStoreFaults' read of the state file at path, size
// bytes long: file and db are what it has open, for damaged to close
// after a panic.
type storeCheck struct {
	path string
	size int64
	file *os.File
	db   *bolt.DB
}

// damaged is the answer for the panic r (a fault, or bbolt meeting a page
// that is not what it expects), and closes what was open.
func (c *storeCheck) damaged(r any) error {
	err := &DamagedError{Path: c.path, Problem: fmt.Sprint(r)}
	switch {
	case c.db != nil:
		// A panic in View left no transaction open (View rolls
		// back on the way out): Close works.
		c.db.Close()
	case c.file != nil:
		// A panic inside bolt.Open: the file (and its lock) is
		// released here; the mapping bbolt made, if it got that
		// far, stays until the process ends.
		c.file.Close()
	}
	return err
}

// open opens the file read-only, reading the free list in Open when
// freelist is set. It fails with ErrStateInUse, the file's own open or
// lock failing, or a *DamagedError.
func (c *storeCheck) open(freelist bool) error {
	c.file, c.db = nil, nil
	var err error
	c.db, err = bolt.Open(c.path, 0o600, &bolt.Options{
		ReadOnly: true, Timeout: lockWait,
		PreLoadFreelist: freelist,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			c.file = f
			return f, err
		},
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return ErrStateInUse
	case err != nil && openedFile(err):
		return err
	case err != nil:
		return &DamagedError{Path: c.path, Problem: err.Error()}
	}
	return nil
}

// readTree compares the header's size with the file's and reads every
// page of the tree (touchBucket), with the free list left unread.
func (c *storeCheck) readTree() error {
	if err := c.open(false); err != nil {
		return err
	}
	err := c.db.View(func(tx *bolt.Tx) error {
		if want := tx.Size(); want > c.size {
			return &DamagedError{Path: c.path, Problem: fmt.Sprintf("truncated: the file holds %d bytes, its header says %d", c.size, want)}
		}
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { touchBucket(b); return nil }); err != nil {
			return &DamagedError{Path: c.path, Problem: err.Error()}
		}
		return nil
	})
	// A read-only database writes nothing: its Close says nothing about
	// the file.
	c.db.Close()
	return err
}

// runCheck runs bbolt's consistency check (Tx.Check) and reports the
// first problem it finds, with how many more there are.
func (c *storeCheck) runCheck() error {
	if err := c.open(true); err != nil {
		return err
	}
	defer c.db.Close()
	return c.db.View(func(tx *bolt.Tx) error {
		var first error
		n := 0
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
			n++
		}
		switch {
		case n == 1:
			return &DamagedError{Path: c.path, Problem: first.Error()}
		case n > 1:
			return &DamagedError{Path: c.path, Problem: fmt.Sprintf("%v (and %d more problems)", first, n-1)}
		}
		return nil
	})
}

// openedFile reports whether err is the open or lock of the file failing
// (a permission, a read-only file system), not something bbolt found in
// what it read.
func openedFile(err error) bool {
	var perr *fs.PathError
	return errors.As(err, &perr)
}

// touchBucket reads every key and value of b and its nested buckets: a
// key or value whose page offsets are garbage lies partly outside the
// file, and its first or last byte is where a read faults.
func touchBucket(b *bolt.Bucket) byte {
	var sum byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) > 0 {
			sum ^= k[0] ^ k[len(k)-1]
		}
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				sum ^= touchBucket(nb)
			}
			continue
		}
		if len(v) > 0 {
			sum ^= v[0] ^ v[len(v)-1]
		}
	}
	return sum
}
