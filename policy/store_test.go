package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", StoreFile)
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestConsentStore(t *testing.T) {
	s, path := openTestStore(t)
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", fi.Mode(), err)
	}
	if _, ok, err := s.Consent("notes"); ok || err != nil {
		t.Fatalf("fresh store has consent: %v %v", ok, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []Consent{{App: "notes", Decision: Allow, At: at}, {App: "mail", Decision: Deny, At: at}} {
		if err := s.SetConsent(c); err != nil {
			t.Fatal(err)
		}
	}
	bad := []Consent{{App: "x", Decision: "maybe"}, {App: "", Decision: Allow}}
	for _, c := range bad {
		if err := s.SetConsent(c); err == nil {
			t.Fatalf("stored %+v", c)
		}
	}
	// Reopen: decisions are on disk.
	s.Close()
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	list, err := s2.Consents()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(list); got != fmt.Sprint([]Consent{{"mail", Deny, at}, {"notes", Allow, at}}) {
		t.Fatalf("consents %s", got)
	}
	if found, err := s2.RevokeConsent("notes"); !found || err != nil {
		t.Fatalf("revoke: %v %v", found, err)
	}
	if found, _ := s2.RevokeConsent("notes"); found {
		t.Fatal("revoked twice")
	}
	if _, ok, _ := s2.Consent("notes"); ok {
		t.Fatal("revoked consent still there")
	}
}

func TestParseDecision(t *testing.T) {
	for in, ok := range map[string]bool{"allow": true, "deny": true, "Allow": false, "": false, "yes": false} {
		if _, err := ParseDecision(in); (err == nil) != ok {
			t.Errorf("ParseDecision(%q) = %v", in, err)
		}
	}
}

func TestSessions(t *testing.T) {
	s, _ := openTestStore(t)
	now := time.Now()
	a, err := s.OpenSession("notes", "personal", "groceries", now, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.OpenSession("notes", "personal", "groceries", now, Limits{}, nil)
	otherAccount, _ := s.OpenSession("notes", "work", "groceries", now, Limits{}, nil)
	otherApp, _ := s.OpenSession("mail", "personal", "groceries", now, Limits{}, nil)
	untitled1, _ := s.OpenSession("notes", "personal", "", now, Limits{}, nil)
	untitled2, _ := s.OpenSession("notes", "personal", "", now, Limits{}, nil)
	if again.ID != a.ID {
		t.Fatal("same title did not reopen the session")
	}
	ids := map[uint64]bool{a.ID: true, otherAccount.ID: true, otherApp.ID: true, untitled1.ID: true, untitled2.ID: true}
	if len(ids) != 5 {
		t.Fatalf("sessions not distinct: %v", ids)
	}
	if turns, err := turnsOf(s, a.ID); err != nil || len(turns) != 0 {
		t.Fatalf("fresh history %v %v", turns, err)
	}
	for i := range 3 {
		tn := Turn{TurnID: fmt.Sprint("T", i), Input: json.RawMessage(`"hi"`), Events: []json.RawMessage{json.RawMessage(`{"n":1}`)}, End: "completed"}
		if err := s.AppendTurn(a.ID, tn, Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	turns, err := turnsOf(s, a.ID)
	if err != nil || len(turns) != 3 || turns[2].TurnID != "T2" || string(turns[0].Events[0]) != `{"n":1}` {
		t.Fatalf("history %+v %v", turns, err)
	}
	if err := s.AppendTurn(9999, Turn{}, Limits{}, nil); !errors.Is(err, ErrNoSession) {
		t.Fatal("appended to a missing session")
	}
}

// TestStoreInUse: a second process opening the same state is refused with
// ErrStateInUse, and succeeds once the first lets go.
func TestStoreInUse(t *testing.T) {
	s, path := openTestStore(t)
	if out := storeHelper(t, path); out != "in_use" {
		t.Fatalf("while held: %q", out)
	}
	s.Close()
	if out := storeHelper(t, path); out != "opened" {
		t.Fatalf("after close: %q", out)
	}
}

func storeHelper(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreHelperProcess$")
	cmd.Env = append(os.Environ(), "OCTOSUP_STORE_HELPER="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[0]
}

// TestStoreHelperProcess is the second daemon of TestStoreInUse; it does
// nothing in a normal run.
func TestStoreHelperProcess(t *testing.T) {
	path := os.Getenv("OCTOSUP_STORE_HELPER")
	if path == "" {
		t.Skip("helper process of TestStoreInUse")
	}
	s, err := OpenStore(path)
	switch {
	case errors.Is(err, ErrStateInUse):
		fmt.Println("in_use")
	case err != nil:
		fmt.Println("error", err)
	default:
		fmt.Println("opened")
		s.Close()
	}
	os.Exit(0)
}

// TestSessionIndex: titled sessions are found through the title index,
// triples that only concatenate alike stay apart, and a state file written
// before the index gets one on open.
func TestSessionIndex(t *testing.T) {
	s, path := openTestStore(t)
	now := time.Now()
	ab, _ := s.OpenSession("a", "b", "c", now, Limits{}, nil)
	a_bc, _ := s.OpenSession("a", "", "bc", now, Limits{}, nil)
	ab2, _ := s.OpenSession("ab", "", "c", now, Limits{}, nil)
	if ab.ID == a_bc.ID || ab.ID == ab2.ID || a_bc.ID == ab2.ID {
		t.Fatalf("triples sharing their concatenation share a session: %d %d %d", ab.ID, a_bc.ID, ab2.ID)
	}
	// An older state file: drop the index, as if it never existed.
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketTitles) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, want := range []Session{ab, a_bc, ab2} {
		got, err := s2.OpenSession(want.App, want.Account, want.Title, now, Limits{}, nil)
		if err != nil || got.ID != want.ID {
			t.Fatalf("after reindexing, %s/%s/%s is session %d (%v), want %d", want.App, want.Account, want.Title, got.ID, err, want.ID)
		}
	}
}
