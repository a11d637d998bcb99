package policy

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"
	"time"
)

// The audit trail's encoder writes what json.Marshal writes.
func TestAppendAuditEntryIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 51, 7, 123456789, time.UTC)
	usual := AuditEntry{Seq: 7, App: "notes", Tool: "notes.search", CallID: "c1", Risk: "read", Confirm: "none",
		Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Account: "me", ContextID: "ctx", Caller: "k",
		Started: at, DurationMS: 0.123}
	tests := []struct {
		name string
		e    AuditEntry
	}{
		{"usual", usual},
		{"zero", AuditEntry{}},
		{"every member", func() AuditEntry { e := usual; e.Approved, e.Error = "allow", "declined"; return e }()},
		{"escapes", func() AuditEntry { e := usual; e.Tool, e.Caller = `a"b\c<d>&`, "é\n\u2028"; return e }()},
		{"local zone", func() AuditEntry { e := usual; e.Started = at.In(time.FixedZone("x", -5*3600-1800)); return e }()},
		{"whole ms", func() AuditEntry { e := usual; e.DurationMS = 1500; return e }()},
		{"tiny", func() AuditEntry { e := usual; e.DurationMS = 1e-9; return e }()},
		{"huge", func() AuditEntry { e := usual; e.DurationMS = 1e22; return e }()},
		{"negative zero", func() AuditEntry { e := usual; e.DurationMS = math.Copysign(0, -1); return e }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendAuditEntry(nil, &tt.e); string(got) != string(want) {
				t.Fatalf("appendAuditEntry = %s\njson.Marshal      = %s", got, want)
			}
		})
	}
}

func FuzzAppendAuditEntry(f *testing.F) {
	f.Add(uint64(1), "notes", "notes.search", "c1", "", 0.5, int64(1764622267123456789))
	f.Add(uint64(2), "a\"b", "<t>", "é", "\x00", 1e-7, int64(-1))
	f.Fuzz(func(t *testing.T, seq uint64, app, tool, callID, caller string, ms float64, ns int64) {
		e := AuditEntry{Seq: seq, App: app, Tool: tool, CallID: callID, Caller: caller, Started: time.Unix(0, ns).UTC(), DurationMS: ms}
		want, err := json.Marshal(e)
		if err != nil {
			return // NaN or infinity: never an entry the daemon makes
		}
		if got := appendAuditEntry(nil, &e); string(got) != string(want) {
			t.Fatalf("appendAuditEntry = %s\njson.Marshal      = %s", got, want)
		}
	})
}

// BenchmarkAppendAudit is the audit writer's batch at its steady state:
// the trail full, each batch trimming as many entries as it adds.
func BenchmarkAppendAudit(b *testing.B) {
	s, err := OpenStore(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const keep, batch = 20000, 1024
	e := AuditEntry{App: "notes", Tool: "notes.search", CallID: "c1", Risk: "read", Confirm: "none",
		Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Account: "me", ContextID: "ctx", Caller: "k",
		Started: time.Now(), DurationMS: 0.123}
	entries := make([]AuditEntry, batch)
	fill := func() {
		for i := range entries {
			entries[i] = e
		}
	}
	for range keep / batch {
		fill()
		if err := s.AppendAudit(entries, keep); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		fill()
		if err := s.AppendAudit(entries, keep); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/entry")
}
