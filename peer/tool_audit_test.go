package peer

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"octosup/policy"
)

func auditStore(t *testing.T) *policy.Store {
	t.Helper()
	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: filepath.Join(t.TempDir(), policy.StoreFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func auditEntry(i int) policy.AuditEntry {
	return policy.AuditEntry{App: "notes", Tool: "t", CallID: fmt.Sprint(i), Outcome: "ok"}
}

// TestAuditBatches: with an interval no test waits for, full batches are
// written as they fill, Audit's flush writes the rest at once, close
// writes what came after; every entry once, in order.
func TestAuditBatches(t *testing.T) {
	store := auditStore(t)
	a := newAuditLog(store, 0, time.Hour, zap.NewNop())
	n := 2*auditBatch + 5
	for i := range n {
		a.add(auditEntry(i))
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := store.Audit("", 0)
	if err != nil || len(got) != n {
		t.Fatalf("after the flush %d entries are on disk (%v), want %d", len(got), err, n)
	}
	a.add(auditEntry(n))
	a.close()
	if got, err = store.Audit("", 0); err != nil || len(got) != n+1 {
		t.Fatalf("after close %d entries are on disk (%v), want %d", len(got), err, n+1)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || e.CallID != fmt.Sprint(i) {
			t.Fatalf("entry %d is seq %d, call %s: want seq %d, call %d", i, e.Seq, e.CallID, i+1, i)
		}
	}
	// After close, an entry waits for the next flush (Audit's).
	a.add(auditEntry(n + 1))
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	if got, _ = store.Audit("", 0); len(got) != n+2 {
		t.Fatalf("a flush after close left %d entries on disk, want %d", len(got), n+2)
	}
}

// TestAuditIntervalWritesABatch: a batch that never fills is written an
// interval after its first entry, by the loop alone.
func TestAuditIntervalWritesABatch(t *testing.T) {
	store := auditStore(t)
	a := newAuditLog(store, 0, time.Millisecond, zap.NewNop())
	defer a.close()
	a.add(auditEntry(0))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := store.Audit("", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry was not written an interval after it came")
		}
		time.Sleep(time.Millisecond)
	}
}
