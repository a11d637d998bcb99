package policy

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Health is what the store has to say about itself, for the daemon's
// status: how it found the state file at start, and what it could not
// write since. A healthy store has only Path.
type Health struct {
	// Path is the file the store runs on: the state file, or a
	// temporary one when Temporary says why.
	Path string
	// Damage is set when the state file was damaged at start.
	Damage *Damage
	// Temporary is why Path is a store for this run only, lost when the
	// daemon stops ("" when Path is the state file).
	Temporary string
	// Restored says where the store's content came from when it is not
	// the state file's own.
	Restored *Restored
	// AuditDropped counts the audit entries that could not be written
	// since start; AuditError is the last such write's error, at
	// AuditAt.
	AuditDropped int
	AuditError   string
	AuditAt      time.Time
	// BackupError is why the last good copy could not be written, at
	// BackupAt; empty once a later one was.
	BackupError string
	BackupAt    time.Time
	// Unreadable says, a line each, which consents and standing rules
	// were found at start that cannot be read (a value damaged where the
	// file's own check does not look, or written by hand), and which
	// audit entries a read of the trail has passed over since. Such a
	// decision counts as never made, so the person is asked again, and
	// stays in the file until an answer replaces it; such an entry stays
	// until the trail's trim drops it.
	Unreadable []string
}

// Damage is what was wrong with the state file at start, and what the
// store did with it.
type Damage struct {
	At      time.Time
	Problem string // e.g. "invalid database"
	// MovedTo is where the file now is (state.db.corrupt-<time>); empty
	// when it could not be moved, and MoveError says why: it was then
	// left where it is, untouched.
	MovedTo   string
	MoveError string
}

// Restored is where the store's content came from at start: From, a copy
// written at At (the good copy, or a state file that could only be
// read), or nothing (From "": the store started empty, and Problem says
// why there was no good copy to use).
type Restored struct {
	From    string
	At      time.Time
	Problem string
}

// Healthy reports whether there is nothing for a person to read.
func (h Health) Healthy() bool {
	return h.Damage == nil && h.Temporary == "" && h.Restored == nil && h.AuditDropped == 0 && h.BackupError == "" && len(h.Unreadable) == 0
}

// Notes says the store's health for a person, a line each; none for a
// healthy store.
func (h Health) Notes() []string {
	var out []string
	if d := h.Damage; d != nil {
		if d.MovedTo != "" {
			out = append(out, fmt.Sprintf("%s was damaged (%s): moved to %s", StoreFile, d.Problem, d.MovedTo))
		} else {
			out = append(out, fmt.Sprintf("%s is damaged (%s) and could not be moved aside (%s): left in place", StoreFile, d.Problem, d.MoveError))
		}
	}
	if h.Temporary != "" {
		out = append(out, fmt.Sprintf("this run keeps its state in %s, lost when octosupd stops: %s", h.Path, h.Temporary))
	}
	if r := h.Restored; r != nil {
		switch {
		case r.From == "":
			line := "started empty: nothing is granted, each app's consent is asked again"
			if r.Problem != "" {
				line += " (no good copy: " + r.Problem + ")"
			}
			out = append(out, line)
		case strings.HasSuffix(r.From, GoodCopySuffix):
			out = append(out, fmt.Sprintf("restored from the good copy of %s: changes after it are lost", r.At.UTC().Format(time.DateTime+" UTC")))
		default:
			out = append(out, fmt.Sprintf("started from a copy of %s", r.From))
		}
	}
	if h.AuditDropped > 0 {
		noun := "entries"
		if h.AuditDropped == 1 {
			noun = "entry"
		}
		out = append(out, fmt.Sprintf("audit: %d %s dropped: %s", h.AuditDropped, noun, h.AuditError))
	}
	if h.BackupError != "" {
		out = append(out, fmt.Sprintf("good copy: not written: %s", h.BackupError))
	}
	return append(out, h.Unreadable...)
}

// unreadableDecisions is Health.Unreadable: the consents and rules in tx
// that cannot be read.
func unreadableDecisions(tx *bolt.Tx) []string {
	var out []string
	_ = tx.Bucket(bucketConsent).ForEach(func(k, v []byte) error {
		if _, err := decodeConsent(k, v); err != nil {
			out = append(out, fmt.Sprintf("consent of app %q cannot be read (%v): it counts as never given, and the app asks again", k, err))
		}
		return nil
	})
	_ = tx.Bucket(bucketRules).ForEach(func(k, v []byte) error {
		if _, err := decodeRule(k, v); err != nil {
			app, tool, _ := bytes.Cut(k, []byte{0})
			out = append(out, fmt.Sprintf("standing rule of app %q for tool %q cannot be read (%v): it counts as none, and the tool asks again", app, tool, err))
		}
		return nil
	})
	return out
}

// Health returns the store's health now.
func (s *Store) Health() Health {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	h := s.health
	if h.Damage != nil {
		d := *h.Damage
		h.Damage = &d
	}
	if h.Restored != nil {
		r := *h.Restored
		h.Restored = &r
	}
	h.Unreadable = slices.Clone(h.Unreadable)
	return h
}

func (s *Store) noteAuditDropped(n int, err error) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.health.AuditDropped += n
	s.health.AuditError = errText(err)
	s.health.AuditAt = s.now()
}

// noteUnreadable adds note to Health.Unreadable, once.
func (s *Store) noteUnreadable(note string) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if !slices.Contains(s.health.Unreadable, note) {
		s.health.Unreadable = append(s.health.Unreadable, note)
	}
}

func (s *Store) noteBackup(err error) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.health.BackupAt = s.now()
	s.health.BackupError = ""
	if err != nil {
		s.health.BackupError = errText(err)
	}
}

// errText is the system's word for err when it has one (no space left on
// device), else the whole error: a person reading status wants the cause,
// the log has the rest.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
