package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The trim keeps exactly the newest keep entries whatever the batches
// and however many leaves they span (an entry here is ~180 bytes: a
// 4 KiB page holds about twenty, so thousands of entries are hundreds of
// leaves under two levels of branches, depth says), also when keep
// shrinks between batches; and it leaves a tree bbolt checks clean, since
// bbolt drops the leaves the trim empties at the commit.
func TestAppendAuditTrimKeepsNewest(t *testing.T) {
	type step struct{ n, keep int }
	tests := []struct {
		name  string
		steps []step
		depth int // of the tree before the last step, at least (0: any)
	}{
		{"under keep", []step{{5, 10}, {4, 10}}, 0},
		{"exactly keep", []step{{6, 10}, {4, 10}}, 0},
		{"one past", []step{{10, 10}, {1, 10}}, 0},
		{"batch larger than keep", []step{{30, 7}, {30, 7}}, 0},
		{"batch of one", []step{{1, 3}, {1, 3}, {1, 3}, {1, 3}, {1, 3}}, 0},
		{"keep shrinks", []step{{50, 100}, {1, 10}, {1, 10}}, 0},
		{"keep grows", []step{{50, 10}, {50, 100}}, 0},
		{"many leaves", []step{{700, 4000}, {700, 4000}, {2100, 4000}, {1500, 4000}, {700, 4000}, {1, 4000}}, 3},
		{"many leaves, keep shrinks to one", []step{{5000, 5000}, {1, 1}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTestStore(t)
			total := 0
			kept := 0
			for i, st := range tt.steps {
				if i == len(tt.steps)-1 {
					var depth int
					if err := s.db.View(func(tx *bolt.Tx) error { depth = tx.Bucket(bucketAudit).Stats().Depth; return nil }); err != nil {
						t.Fatal(err)
					}
					if depth < tt.depth {
						t.Fatalf("the tree is %d deep before the last step, want %d or more", depth, tt.depth)
					}
				}
				batch := make([]AuditEntry, st.n)
				for j := range batch {
					batch[j] = AuditEntry{App: "notes", Tool: "notes.search", CallID: fmt.Sprintf("c%d", total+j+1), Outcome: "ok", End: "finished"}
				}
				if err := s.AppendAudit(batch, st.keep); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				total += st.n
				kept = min(kept+st.n, st.keep)
				got, err := s.Audit("", 0)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if len(got) != kept {
					t.Fatalf("step %d: %d entries kept, want %d", i, len(got), kept)
				}
				for j, e := range got {
					want := uint64(total - kept + j + 1)
					if e.Seq != want || e.CallID != fmt.Sprintf("c%d", want) {
						t.Fatalf("step %d: entry %d is seq %d (%s), want %d", i, j, e.Seq, e.CallID, want)
					}
				}
				if err := s.db.View(func(tx *bolt.Tx) error {
					for err := range tx.Check() {
						return err
					}
					return nil
				}); err != nil {
					t.Fatalf("step %d: bbolt check: %v", i, err)
				}
			}
		})
	}
}

// The stored values are json.Marshal's bytes of the entries, each its own
// (the batch's values share an array that grows past its first guess when
// entries are long), so a daemon of before reads the trail as it did.
func TestAppendAuditStoresJSON(t *testing.T) {
	s, path := openTestStore(t)
	at := time.Date(2026, 12, 1, 20, 51, 7, 123456789, time.UTC)
	var batch []AuditEntry
	for i := range 40 {
		e := AuditEntry{App: "notes", Tool: "notes.search", CallID: fmt.Sprintf("c%d", i), Risk: "read", Confirm: "none",
			Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Started: at.Add(time.Duration(i) * time.Second), DurationMS: float64(i) / 8}
		switch i % 4 {
		case 1:
			e.Caller = strings.Repeat("k", 2000) // past the array's guess
		case 2:
			e.Tool = "é\"<x>" // through json.Marshal
		}
		batch = append(batch, e)
	}
	if err := s.AppendAudit(batch, 30); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
			seq := binary.BigEndian.Uint64(k)
			want, err := json.Marshal(batch[seq-1])
			if err != nil {
				return err
			}
			if !bytes.Equal(v, want) {
				return fmt.Errorf("entry %d is stored as %s\nwant %s", seq, v, want)
			}
			n++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 30 {
		t.Fatalf("%d entries stored, want 30", n)
	}
}

// BenchmarkAppendAudit is the audit writer's batch at its steady state:
// the trail full, each batch trimming as many entries as it adds. keep is
// a small trail's and the daemon's (DefaultAuditKeep); batch is the
// writer's full batch (peer's auditBatch) and a backlog's (up to peer's
// maxAuditPending in one batch when the store falls behind).
func BenchmarkAppendAudit(b *testing.B) {
	for _, c := range []struct{ keep, batch int }{{20000, 1024}, {DefaultAuditKeep, 1024}, {DefaultAuditKeep, 16384}} {
		b.Run(fmt.Sprintf("keep=%d/batch=%d", c.keep, c.batch), func(b *testing.B) { benchmarkAppendAudit(b, c.keep, c.batch) })
	}
}

func benchmarkAppendAudit(b *testing.B, keep, batch int) {
	s, err := OpenStore(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := AuditEntry{App: "notes", Tool: "notes.search", CallID: "c1", Risk: "read", Confirm: "none",
		Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Account: "me", ContextID: "ctx", Caller: "k",
		Started: time.Now(), DurationMS: 0.123}
	entries := make([]AuditEntry, batch)
	fill := func() {
		for i := range entries {
			entries[i] = e
		}
	}
	for range keep/batch + 1 {
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

// BenchmarkAppendAuditEntry is the encoding of the usual entry alone.
func BenchmarkAppendAuditEntry(b *testing.B) {
	e := AuditEntry{Seq: 123456, App: "notes", Tool: "notes.search", CallID: "k-123456", Risk: "read", Confirm: "none",
		Decision: AuditDecisionNone, Outcome: "ok", End: "finished", Account: "me", ContextID: "ctx-1", Caller: "kernel",
		Started: time.Now(), DurationMS: 0.123}
	buf := make([]byte, 0, 512)
	for range b.N {
		buf = appendAuditEntry(buf[:0], &e)
	}
	b.SetBytes(int64(len(buf)))
}
