package policy

import (
	"io"

	bolt "go.etcd.io/bbolt"
)

// The good copy is written by a goroutine of the store, not by the change
// that asks for it: the copy is the whole file, which takes a while once
// the history is large, and the consent or rule it follows is already
// fsync'd in the state file. The goroutine starts with a request and ends
// when no other came while it wrote (each such request makes one more
// copy, of the newest state); Close waits for it.

// backupSoon asks for a good copy of the state as it is now (or later).
// It never blocks.
func (s *Store) backupSoon() {
	if s.good == "" {
		return
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	switch {
	case s.bclosed:
	case s.brunning:
		s.bpending = true
	default:
		s.brunning = true
		s.bwg.Add(1)
		go s.backups()
	}
}

func (s *Store) backups() {
	defer s.bwg.Done()
	for {
		s.noteBackup(s.writeGoodCopy())
		s.bmu.Lock()
		again := s.bpending
		s.bpending, s.brunning = false, again
		s.bmu.Unlock()
		if !again {
			return
		}
	}
}

// stopBackups waits for the copy being written and the one asked for
// meanwhile; later requests are ignored.
func (s *Store) stopBackups() {
	s.bmu.Lock()
	s.bclosed = true
	s.bmu.Unlock()
	s.bwg.Wait()
}

// writeGoodCopy writes the good copy: the database as one read
// transaction sees it (bbolt's Tx.WriteTo, a consistent snapshot while
// writes go on), renamed over the last one only once it is whole and
// fsync'd.
func (s *Store) writeGoodCopy() error {
	return writeAtomic(s.good, func(w io.Writer) error {
		return s.db.View(func(tx *bolt.Tx) error {
			_, err := tx.WriteTo(w)
			return err
		})
	})
}
