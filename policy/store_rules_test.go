package policy

import (
	"fmt"
	"testing"
	"time"
)

func TestRulesStore(t *testing.T) {
	s, path := openTestStore(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, r := range []Rule{
		{App: "notes", Tool: "notes.wipe", Decision: Deny, At: at},
		{App: "notes", Tool: "notes.append", Decision: Allow, At: at},
		{App: "notes-b", Tool: "notes.append", Decision: Allow, At: at}, // a prefix of another app's id
		{App: "notes", Tool: "notes.wipe", Decision: Allow, At: at},     // replaces the deny
	} {
		if err := s.SetRule(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Rule{{App: "notes", Tool: "x", Decision: "maybe"}, {App: "", Tool: "x", Decision: Allow}, {App: "a", Decision: Allow}} {
		if err := s.SetRule(bad); err == nil {
			t.Fatalf("stored %+v", bad)
		}
	}
	if r, ok, err := s.Rule("notes", "notes.wipe"); !ok || err != nil || r.Decision != Allow {
		t.Fatalf("rule %+v %v %v", r, ok, err)
	}
	if _, ok, _ := s.Rule("notes", "notes.search"); ok {
		t.Fatal("rule for a tool never ruled")
	}
	// Persisted.
	s.Close()
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	all, err := s2.Rules("")
	if err != nil {
		t.Fatal(err)
	}
	want := "[{notes notes.append allow 2026-01-02 03:04:05 +0000 UTC} {notes notes.wipe allow 2026-01-02 03:04:05 +0000 UTC} {notes-b notes.append allow 2026-01-02 03:04:05 +0000 UTC}]"
	if got := fmt.Sprint(all); got != want {
		t.Fatalf("rules %s", got)
	}
	if only, _ := s2.Rules("notes-b"); len(only) != 1 {
		t.Fatalf("notes-b rules %v", only)
	}
	tests := []struct {
		app, tool string
		removed   int
	}{
		{"notes", "notes.search", 0},
		{"notes", "notes.wipe", 1},
		{"notes", "", 1}, // every rule of notes, none of notes-b
		{"notes", "", 0},
	}
	for _, tt := range tests {
		gone, err := s2.RevokeRules(tt.app, tt.tool)
		if err != nil || len(gone) != tt.removed {
			t.Fatalf("revoke %s %q: %v %v", tt.app, tt.tool, gone, err)
		}
	}
	if left, _ := s2.Rules(""); len(left) != 1 || left[0].App != "notes-b" {
		t.Fatalf("left %v", left)
	}
}

func TestAuditStore(t *testing.T) {
	s, path := openTestStore(t)
	var batch []AuditEntry
	for i := range 10 {
		app := "notes"
		if i%2 == 1 {
			app = "mail"
		}
		batch = append(batch, AuditEntry{App: app, Tool: "t", CallID: fmt.Sprint(i), Outcome: "ok"})
	}
	if err := s.AppendAudit(batch[:6], 8); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(batch[6:], 8); err != nil { // 10 written, 8 kept
		t.Fatal(err)
	}
	if err := s.AppendAudit(nil, 8); err != nil {
		t.Fatal(err)
	}
	ids := func(es []AuditEntry) string {
		out := ""
		for _, e := range es {
			out += fmt.Sprintf("%d:%s ", e.Seq, e.CallID)
		}
		return out
	}
	all, err := s.Audit("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); got != "3:2 4:3 5:4 6:5 7:6 8:7 9:8 10:9 " {
		t.Fatalf("audit %s", got)
	}
	if got, _ := s.Audit("notes", 2); ids(got) != "7:6 9:8 " {
		t.Fatalf("last 2 of notes %s", ids(got))
	}
	s.Close()
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, _ := s2.Audit("mail", 0); ids(got) != "4:3 6:5 8:7 10:9 " {
		t.Fatalf("mail after reopen %s", ids(got))
	}
}
