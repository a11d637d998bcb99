package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// recoverNow is the clock of these tests: the name a damaged file is
// moved to is known.
var recoverNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

const movedName = StoreFile + CorruptSuffix + "20260304T050607Z"

// populatedStore writes a state file with a consent, a rule and audit
// entries (3000: a hundred pages and more, a tree with branches),
// closes it (which writes the good copy), and returns its path.
func populatedStore(t *testing.T, dir string, audit int) string {
	t.Helper()
	path := filepath.Join(dir, StoreFile)
	s, err := OpenStoreWith(StoreConfig{Path: path, Now: func() time.Time { return recoverNow }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConsent(Consent{App: "notes", Decision: Allow, At: recoverNow}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRule(Rule{App: "notes", Tool: "notes.append", Decision: Allow, At: recoverNow}); err != nil {
		t.Fatal(err)
	}
	entries := make([]AuditEntry, audit)
	for i := range entries {
		entries[i] = AuditEntry{App: "notes", Tool: "notes.search", CallID: fmt.Sprint("c", i), Outcome: "ok", End: "finished", Started: recoverNow}
	}
	if err := s.AppendAudit(entries, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := checkStore(path + GoodCopySuffix); err != nil {
		t.Fatalf("the good copy after Close: %v", err)
	}
	return path
}

// garbage is n bytes that are no bbolt page (nor a run of zeroes).
func garbage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + 7)
	}
	return b
}

// Ways to damage a state file, as found on disks: each is applied to a
// populated store.
var damages = []struct {
	name    string
	damage  func(t *testing.T, path string)
	problem string // in Health's Damage.Problem
}{
	{"garbage over the header", func(t *testing.T, path string) { writeAt(t, path, garbage(8<<10), 0) }, "invalid database"},
	{"truncated", func(t *testing.T, path string) {
		size := dbSize(t, path)
		if err := os.Truncate(path, size/2); err != nil {
			t.Fatal(err)
		}
	}, "truncated"},
	{"garbage pages", func(t *testing.T, path string) {
		// Four pages from a leaf in the middle of the tree: pages the
		// walk reads, not free ones (garbage there harms nothing).
		writeAt(t, path, garbage(4*os.Getpagesize()), int64(leafPage(t, path))*int64(os.Getpagesize()))
	}, ""},
	{"zero-length file", func(t *testing.T, path string) {
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
	}, "the file is empty"},
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// dbSize is the size the state file's header gives.
func dbSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return size
}

// leafPage is a leaf page of the tree in the middle of the file.
func leafPage(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id := -1
	db.View(func(tx *bolt.Tx) error {
		pages := int(tx.Size() / int64(os.Getpagesize()))
		for i := pages / 2; i < pages && id < 0; i++ {
			if p, err := tx.Page(i); err == nil && p != nil && p.Type == "leaf" {
				id = i
			}
		}
		return nil
	})
	if id < 0 {
		t.Fatal("no leaf page in the second half of the file")
	}
	return id
}

// TestDamagedStoreIsMovedAside: every kind of damage is found at open;
// the file is moved aside, byte for byte, and the store restored from
// the good copy (consent and rules as they were) or, with none, started
// empty (nothing granted). The daemon starts either way.
func TestDamagedStoreIsMovedAside(t *testing.T) {
	for _, d := range damages {
		for _, withCopy := range []bool{true, false} {
			name := d.name + "/good copy"
			if !withCopy {
				name = d.name + "/no good copy"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := populatedStore(t, dir, 3000)
				if !withCopy {
					if err := os.Remove(path + GoodCopySuffix); err != nil {
						t.Fatal(err)
					}
				}
				d.damage(t, path)
				damaged, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}

				s, err := OpenStoreWith(StoreConfig{Path: path, Now: func() time.Time { return recoverNow }})
				if err != nil {
					t.Fatalf("open a store %s: %v", d.name, err)
				}
				defer s.Close()
				h := s.Health()
				if h.Damage == nil || !strings.Contains(h.Damage.Problem, d.problem) || h.Damage.MovedTo != filepath.Join(dir, movedName) {
					t.Fatalf("Health().Damage = %+v, want the problem %q and the file moved to %s", h.Damage, d.problem, movedName)
				}
				if kept, err := os.ReadFile(h.Damage.MovedTo); err != nil || !bytes.Equal(kept, damaged) {
					t.Fatalf("the damaged file is not kept as it was: %v (%d bytes of %d)", err, len(kept), len(damaged))
				}
				if h.Path != path || h.Temporary != "" || h.Healthy() {
					t.Fatalf("Health() = %+v, want the store in place and not healthy", h)
				}
				_, consented, err := s.Consent("notes")
				if err != nil {
					t.Fatal(err)
				}
				rules, err := s.Rules("")
				if err != nil {
					t.Fatal(err)
				}
				if withCopy {
					if h.Restored == nil || h.Restored.From != path+GoodCopySuffix || !consented || len(rules) != 1 {
						t.Fatalf("restored %+v, consent %v, rules %v: want the good copy's consent and rule", h.Restored, consented, rules)
					}
				} else if h.Restored == nil || h.Restored.From != "" || consented || len(rules) != 0 {
					t.Fatalf("restored %+v, consent %v, rules %v: want an empty store", h.Restored, consented, rules)
				}
				// The store works: a decision is kept, and survives a
				// reopen, which finds nothing wrong.
				if err := s.SetConsent(Consent{App: "mail", Decision: Deny, At: recoverNow}); err != nil {
					t.Fatal(err)
				}
				s.Close()
				s2, err := OpenStore(path)
				if err != nil {
					t.Fatal(err)
				}
				defer s2.Close()
				if _, ok, _ := s2.Consent("mail"); !ok || !s2.Health().Healthy() {
					t.Fatalf("after a reopen: consent kept %v, health %+v", ok, s2.Health())
				}
			})
		}
	}
}

// TestDamagedGoodCopyStartsEmpty: a good copy that is damaged too is not
// restored from.
func TestDamagedGoodCopyStartsEmpty(t *testing.T) {
	path := populatedStore(t, t.TempDir(), 3000)
	writeAt(t, path, garbage(8<<10), 0)
	writeAt(t, path+GoodCopySuffix, garbage(8<<10), 0)
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Health()
	if h.Restored == nil || h.Restored.From != "" || !strings.Contains(h.Restored.Problem, "state.db.good is damaged too") {
		t.Fatalf("Health().Restored = %+v", h.Restored)
	}
	if _, ok, _ := s.Consent("notes"); ok {
		t.Fatal("consent from a damaged good copy")
	}
}

// TestGoodCopyFollowsChanges: the good copy has each consent and rule
// change once the store is closed, and a new store writes one at once.
func TestGoodCopyFollowsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreFile)
	good := path + GoodCopySuffix
	read := func() (consents []Consent, rules []Rule) {
		t.Helper()
		s, err := OpenStore(good + ".read")
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := copyFile(good, good+".read"); err != nil {
			t.Fatal(err)
		}
		s, err = OpenStore(good + ".read")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		consents, _ = s.Consents()
		rules, _ = s.Rules("")
		return consents, rules
	}
	steps := []struct {
		name   string
		change func(s *Store) error
		apps   int // consents in the copy after it
		rules  int
	}{
		{"new store", func(*Store) error { return nil }, 0, 0},
		{"consent", func(s *Store) error { return s.SetConsent(Consent{App: "notes", Decision: Allow, At: recoverNow}) }, 1, 0},
		{"rule", func(s *Store) error {
			return s.SetRule(Rule{App: "notes", Tool: "t", Decision: Deny, At: recoverNow})
		}, 1, 1},
		{"rule revoked", func(s *Store) error { _, err := s.RevokeRules("notes", ""); return err }, 1, 0},
		{"consent revoked", func(s *Store) error { _, err := s.RevokeConsent("notes"); return err }, 0, 0},
	}
	for _, st := range steps {
		s, err := OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.change(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if h := s.Health(); h.BackupError != "" {
			t.Fatalf("%s: %s", st.name, h.BackupError)
		}
		c, r := read()
		if len(c) != st.apps || len(r) != st.rules {
			t.Fatalf("after %s the good copy has consents %v and rules %v, want %d and %d", st.name, c, r, st.apps, st.rules)
		}
	}
}

// readOnlyDir makes dir and what is in it impossible to change: a
// read-only tmpfs for root (whom modes do not stop), modes for anyone
// else. setup fills it first.
func readOnlyDir(t *testing.T, dir string, setup func()) {
	t.Helper()
	if os.Getuid() != 0 {
		setup()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.Chmod(filepath.Join(dir, e.Name()), 0o400)
		}
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		return
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
		t.Skipf("a tmpfs for the read-only directory: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	setup()
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
}

// TestReadOnlyStateDir: a state directory that cannot be written keeps
// nothing from starting. The store runs on a temporary file in the
// scratch directory, started from the state file when it checks, from
// the good copy when it does not, else empty; the files are left as they
// are, and the temporary one is removed at Close. With no scratch
// directory it is an error that names the cause.
func TestReadOnlyStateDir(t *testing.T) {
	tests := []struct {
		name     string
		prepare  func(t *testing.T, path string)
		consent  bool   // the store has the populated consent
		from     string // Restored.From's base name; "" for empty
		damaged  bool
		whyParts string
	}{
		{"healthy file", func(*testing.T, string) {}, true, StoreFile, false, "cannot be written"},
		{"damaged file, good copy", func(t *testing.T, path string) { writeAt(t, path, garbage(8<<10), 0) }, true, StoreFile + GoodCopySuffix, true, "could not be moved aside"},
		{"damaged file, no good copy", func(t *testing.T, path string) {
			writeAt(t, path, garbage(8<<10), 0)
			os.Remove(path + GoodCopySuffix)
		}, false, "", true, "could not be moved aside"},
		{"no file", func(t *testing.T, path string) {
			os.Remove(path)
			os.Remove(path + GoodCopySuffix)
		}, false, "", false, "cannot be written"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, StoreFile)
			var before map[string][]byte
			readOnlyDir(t, dir, func() {
				src := populatedStore(t, t.TempDir(), 10)
				for _, name := range []string{StoreFile, StoreFile + GoodCopySuffix} {
					if err := copyFile(filepath.Join(filepath.Dir(src), name), filepath.Join(dir, name)); err != nil {
						t.Fatal(err)
					}
				}
				tt.prepare(t, path)
				before = dirFiles(t, dir)
			})

			if _, err := OpenStore(path); err == nil || !(errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES)) {
				t.Fatalf("with no scratch directory: %v, want the read-only error", err)
			}
			scratch := filepath.Join(t.TempDir(), "run")
			s, err := OpenStoreWith(StoreConfig{Path: path, Scratch: scratch, Now: func() time.Time { return recoverNow }})
			if err != nil {
				t.Fatalf("open in a read-only directory: %v", err)
			}
			h := s.Health()
			if h.Temporary == "" || !strings.Contains(h.Temporary, tt.whyParts) || filepath.Dir(h.Path) != scratch {
				t.Fatalf("Health() = %+v, want a temporary store in %s because it %s", h, scratch, tt.whyParts)
			}
			if (h.Damage != nil) != tt.damaged || (h.Damage != nil && (h.Damage.MovedTo != "" || h.Damage.MoveError == "")) {
				t.Fatalf("Health().Damage = %+v, want damaged %v and not moved", h.Damage, tt.damaged)
			}
			if h.Restored == nil || filepath.Base(h.Restored.From) != tt.from && !(tt.from == "" && h.Restored.From == "") {
				t.Fatalf("Health().Restored = %+v, want from %q", h.Restored, tt.from)
			}
			if _, ok, _ := s.Consent("notes"); ok != tt.consent {
				t.Fatalf("consent of notes: %v, want %v", ok, tt.consent)
			}
			// The store works, for this run.
			if err := s.SetConsent(Consent{App: "mail", Decision: Allow, At: recoverNow}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(h.Path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the temporary store is left behind: %v", err)
			}
			if after := dirFiles(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("the read-only directory changed")
			}
		})
	}
}

func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// TestAuditOnAFullDisk: on a full file system (a small tmpfs: root only)
// an audit write fails with ENOSPC, the store counts what it dropped for
// status, and goes on: reads work, and writes again once there is room.
func TestAuditOnAFullDisk(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s, err := OpenStore(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetConsent(Consent{App: "notes", Decision: Allow, At: recoverNow}); err != nil {
		t.Fatal(err)
	}
	// Fill what is left.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	f.Close()

	batch := func(n int) []AuditEntry {
		out := make([]AuditEntry, n)
		for i := range out {
			out[i] = AuditEntry{App: "notes", Tool: "notes.search", CallID: fmt.Sprint("c", i), Started: recoverNow}
		}
		return out
	}
	// Batches larger than the free pages bbolt may still have inside its
	// file: each must grow it. (50 entries fitted in them once in CI,
	// and the append took.)
	dropped := 0
	for _, n := range []int{500, 370} {
		if err := s.AppendAudit(batch(n), 0); !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("AppendAudit on a full disk: %v, want ENOSPC", err)
		}
		dropped += n
	}
	h := s.Health()
	if h.AuditDropped != dropped || h.Healthy() || !strings.Contains(strings.Join(h.Notes(), "\n"), "audit: 870 entries dropped: no space left on device") {
		t.Fatalf("Health() = %+v, notes %q", h, h.Notes())
	}
	if _, ok, err := s.Consent("notes"); !ok || err != nil {
		t.Fatalf("reading on a full disk: %v %v", ok, err)
	}
	os.Remove(filler)
	if err := s.AppendAudit(batch(3), 0); err != nil {
		t.Fatalf("AppendAudit once there is room: %v", err)
	}
	if got, err := s.Audit("", 0); err != nil || len(got) != 3 {
		t.Fatalf("audit after the disk was full: %d entries, %v", len(got), err)
	}
}

// TestNotes: what status says of each state of the store.
func TestNotes(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		h    Health
		want []string
	}{
		{"healthy", Health{Path: "/s/state.db"}, nil},
		{"restored", Health{Path: "/s/state.db", Damage: &Damage{Problem: "invalid database", MovedTo: "/s/" + movedName},
			Restored: &Restored{From: "/s/state.db.good", At: at}}, []string{
			"state.db was damaged (invalid database): moved to /s/" + movedName,
			"restored from the good copy of 2026-03-01 10:00:00 UTC: changes after it are lost"}},
		{"empty", Health{Path: "/s/state.db", Damage: &Damage{Problem: "the file is empty", MovedTo: "/s/" + movedName},
			Restored: &Restored{Problem: "there is no state.db.good"}}, []string{
			"state.db was damaged (the file is empty): moved to /s/" + movedName,
			"started empty: nothing is granted, each app's consent is asked again (no good copy: there is no state.db.good)"}},
		{"temporary", Health{Path: "/run/state-1.db", Temporary: "state.db could not be moved aside",
			Damage:   &Damage{Problem: "invalid database", MoveError: "read-only file system"},
			Restored: &Restored{Problem: "there is no state.db.good"}}, []string{
			"state.db is damaged (invalid database) and could not be moved aside (read-only file system): left in place",
			"this run keeps its state in /run/state-1.db, lost when octosupd stops: state.db could not be moved aside",
			"started empty: nothing is granted, each app's consent is asked again (no good copy: there is no state.db.good)"}},
		{"audit and copy", Health{Path: "/s/state.db", AuditDropped: 1, AuditError: "no space left on device", BackupError: "no space left on device"}, []string{
			"audit: 1 entry dropped: no space left on device",
			"good copy: not written: no space left on device"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.Notes(); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Fatalf("Notes() =\n%q\nwant\n%q", got, tt.want)
			}
			if tt.h.Healthy() != (tt.want == nil) {
				t.Fatalf("Healthy() = %v with notes %q", tt.h.Healthy(), tt.want)
			}
		})
	}
}

// BenchmarkCheckStore is the check every start makes, of a state file
// holding a full audit trail (DefaultAuditKeep entries, ~34 MiB).
func BenchmarkCheckStore(b *testing.B) {
	path := filepath.Join(b.TempDir(), StoreFile)
	s, err := OpenStore(path)
	if err != nil {
		b.Fatal(err)
	}
	entries := make([]AuditEntry, 10_000)
	for i := range entries {
		entries[i] = AuditEntry{App: "notes", Tool: "notes.search", CallID: fmt.Sprint("c", i), Risk: "read", Confirm: "none",
			Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Account: "personal", ContextID: "n-1", Started: recoverNow}
	}
	for range DefaultAuditKeep / len(entries) {
		if err := s.AppendAudit(entries, 0); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	for b.Loop() {
		if err := checkStore(path); err != nil {
			b.Fatal(err)
		}
	}
	fi, _ := os.Stat(path)
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}

// TestGoodCopyNotWritten: a good copy that cannot be written (here its
// temporary file's name is taken by a directory, which stops root too)
// leaves the change in place and says so in Health, until a later copy
// is written.
func TestGoodCopyNotWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreFile)
	blocker := path + GoodCopySuffix + ".tmp"
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConsent(Consent{App: "notes", Decision: Allow, At: recoverNow}); err != nil {
		t.Fatalf("a consent whose good copy cannot be written: %v", err)
	}
	s.stopBackups() // the copies asked for so far are written (or not)
	h := s.Health()
	if h.BackupError != "is a directory" || h.Healthy() || fmt.Sprint(h.Notes()) != "[good copy: not written: is a directory]" {
		t.Fatalf("Health() = %+v, notes %q", h, h.Notes())
	}
	s.Close()
	if _, err := os.Stat(path + GoodCopySuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a good copy was written: %v", err)
	}

	os.Remove(blocker)
	s, err = OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Consent("notes"); !ok {
		t.Fatal("the consent is not kept")
	}
	s.Close()
	if h := s.Health(); h.BackupError != "" || !h.Healthy() {
		t.Fatalf("after a good copy was written: %+v", h)
	}
	if err := checkStore(path + GoodCopySuffix); err != nil {
		t.Fatal(err)
	}
}

// TestStoreDirLocked: while another daemon checks, moves or restores the
// state file (it holds the state directory's lock), a second one waits,
// then gives up with ErrStateInUse, having touched nothing.
func TestStoreDirLocked(t *testing.T) {
	path := populatedStore(t, t.TempDir(), 10)
	writeAt(t, path, garbage(8<<10), 0)
	unlock, err := lockDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path); !errors.Is(err, ErrStateInUse) {
		t.Fatalf("open while the directory is locked: %v, want ErrStateInUse", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the state file was touched: %v", err)
	}
	unlock()
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// OpenStore opens the state file at path with no scratch directory: the
// tests' shorthand of OpenStoreWith.
func OpenStore(path string) (*Store, error) { return OpenStoreWith(StoreConfig{Path: path}) }
