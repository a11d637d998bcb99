package policy

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestUnreadableDecisions holds a state file whose consent and rule
// values are damaged where bbolt's check does not look (the values,
// which it does not checksum): each such decision counts as never made
// and is named in the store's health; the readable ones, and the store,
// go on as before. Before, one such value failed every list of consents
// or rules, so the peer link refused every app's requests (internal) at
// every start, and a revoke could not remove it.
func TestUnreadableDecisions(t *testing.T) {
	s, path := openTestStore(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []Consent{{App: "clock", Decision: Allow, At: at}, {App: "notes", Decision: Allow, At: at}} {
		if err := s.SetConsent(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []Rule{{App: "notes", Tool: "notes.append", Decision: Allow, At: at}, {App: "notes", Tool: "notes.wipe", Decision: Deny, At: at}} {
		if err := s.SetRule(r); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	damage := []struct {
		bucket, key []byte
		value       string
		note        string // what the store's note says of it
	}{
		{bucketConsent, []byte("notes"), `{"app":"notes","decision":"allow","at":"2026-01-02T03:04:05Z"` + "\x00garbage", `consent of app "notes" cannot be read (invalid character`},
		{bucketConsent, []byte("mail"), `{"app":"mail","decision":"maybe","at":"2026-01-02T03:04:05Z"}`, `consent of app "mail" cannot be read (decision "maybe"`},
		// A value that names another app than its key must not grant that
		// app anything.
		{bucketConsent, []byte("paint"), `{"app":"clock","decision":"deny","at":"2026-01-02T03:04:05Z"}`, `consent of app "paint" cannot be read (it names app "clock")`},
		{bucketRules, ruleKey("notes", "notes.wipe"), `{"app":"notes","tool":"notes.wipe","decision":`, `standing rule of app "notes" for tool "notes.wipe" cannot be read (unexpected end of JSON input)`},
		{bucketRules, ruleKey("clock", "clock.set"), `{"app":"notes","tool":"notes.append","decision":"allow","at":"2026-01-02T03:04:05Z"}`, `standing rule of app "clock" for tool "clock.set" cannot be read (it names app "notes" and tool "notes.append")`},
	}
	for _, d := range damage {
		putRaw(t, path, d.bucket, d.key, d.value)
	}

	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Health()
	if h.Healthy() || len(h.Unreadable) != len(damage) {
		t.Fatalf("health %+v: want %d unreadable decisions", h, len(damage))
	}
	notes := strings.Join(h.Notes(), "\n")
	for _, d := range damage {
		if !strings.Contains(notes, d.note) {
			t.Errorf("the store's notes do not say %q:\n%s", d.note, notes)
		}
	}

	consents, err := s.Consents()
	if err != nil {
		t.Fatalf("consents: %v", err)
	}
	if len(consents) != 1 || consents[0].App != "clock" || consents[0].Decision != Allow {
		t.Fatalf("consents %+v: want clock's alone, allow", consents)
	}
	for _, app := range []string{"notes", "mail", "paint"} {
		if c, ok, err := s.Consent(app); ok || err != nil {
			t.Errorf("consent of %s: %+v %v %v: want none, no error", app, c, ok, err)
		}
	}
	rules, err := s.Rules("")
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	if len(rules) != 1 || rules[0].Tool != "notes.append" {
		t.Fatalf("rules %+v: want notes.append's alone", rules)
	}
	if r, ok, err := s.Rule("notes", "notes.wipe"); ok || err != nil {
		t.Errorf("rule notes.wipe: %+v %v %v: want none, no error", r, ok, err)
	}

	// The person's next answer replaces a damaged consent; a revoke
	// removes a damaged rule (returning the readable ones it removed).
	if err := s.SetConsent(Consent{App: "notes", Decision: Deny, At: at}); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := s.Consent("notes"); !ok || err != nil || c.Decision != Deny {
		t.Fatalf("consent of notes after an answer: %+v %v %v", c, ok, err)
	}
	gone, err := s.RevokeRules("notes", "")
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if len(gone) != 1 || gone[0].Tool != "notes.append" {
		t.Fatalf("revoked %+v: want notes.append's alone", gone)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketRules).Get(ruleKey("notes", "notes.wipe")); v != nil {
			t.Errorf("the damaged rule is still there after a revoke of the app's rules: %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableSessionsArePassedOver: a session record damaged in the
// file no longer stops its app. Eviction passes it over (it used to fail
// every open of the account at its limit, for good), and its title gets
// a new session (it used to fail every open of that title).
func TestUnreadableSessionsArePassedOver(t *testing.T) {
	s, path := openTestStore(t)
	lim := Limits{Sessions: 3}
	titled := mustOpen(t, s, "notes", "personal", "groceries", lim, nil)
	u1 := mustOpen(t, s, "notes", "personal", "", lim, nil)
	u2 := mustOpen(t, s, "notes", "personal", "", lim, nil)
	s.Close()
	for _, id := range []uint64{titled.ID, u1.ID} {
		putRaw(t, path, bucketSessions, u64(id), `{"id":`)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	u3, err := s.OpenSession("notes", "personal", "", time.Now(), lim, nil)
	if err != nil {
		t.Fatalf("open at the limit with the oldest record damaged: %v", err)
	}
	if !exists(t, s, u1.ID) || exists(t, s, u2.ID) || !exists(t, s, u3.ID) {
		t.Fatalf("eviction: want the damaged u1 kept, u2 evicted, u3 there")
	}
	again, err := s.OpenSession("notes", "personal", "groceries", time.Now(), Limits{}, nil)
	if err != nil {
		t.Fatalf("reopen a title whose record is damaged: %v", err)
	}
	if again.ID == titled.ID || again.Title != "groceries" {
		t.Fatalf("reopened %+v: want a new session for the title", again)
	}
	if next, err := s.OpenSession("notes", "personal", "groceries", time.Now(), Limits{}, nil); err != nil || next.ID != again.ID {
		t.Fatalf("the title's new session is not the one reopened: %+v %v", next, err)
	}
}

// putRaw writes value under key in bucket of the (closed) state file at
// TestUnreadableAuditEntry: an audit entry that does not decode is left
// out of the trail and named in the store's health; the entries around
// it are listed as before. Before, one such entry failed every read of
// the trail (octosupctl audit) until a hundred thousand newer entries
// pushed it out.
func TestUnreadableAuditEntry(t *testing.T) {
	s, path := openTestStore(t)
	var entries []AuditEntry
	for _, call := range []string{"c1", "c2", "c3"} {
		entries = append(entries, AuditEntry{App: "notes", Tool: "notes.append", CallID: call, Outcome: "ok", End: "finished"})
	}
	if err := s.AppendAudit(entries, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], entries[1].Seq)
	putRaw(t, path, bucketAudit, key[:], `{"seq":2,"app":"notes","tool":`)

	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 { // a second read names it once
		got, err := s.Audit("", 0)
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		if len(got) != 2 || got[0].CallID != "c1" || got[1].CallID != "c3" {
			t.Fatalf("audit %+v: want c1 and c3", got)
		}
	}
	want := "audit entry 2 cannot be read (unexpected end of JSON input): it is left out of the trail"
	if h := s.Health(); h.Healthy() || len(h.Unreadable) != 1 || h.Unreadable[0] != want {
		t.Fatalf("health %+v: want the one note %q", h, want)
	}
}

// path, as a damaged disk or a hand edit would: past the store's checks.
func putRaw(t *testing.T, path string, bucket, key []byte, value string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, []byte(value)) }); err != nil {
		t.Fatal(err)
	}
}
