package peer

import (
	"fmt"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"octosup/policy"
)

// A flush takes the signals of the entries it writes with them: left in
// their channels, a full batch's signal made the writer's next round
// write at once the few entries added meanwhile (every other transaction
// a small one at a high rate). Entries stay in order across flushes, and
// close writes the last ones.
func TestAuditFlushTakesItsSignals(t *testing.T) {
	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: filepath.Join(t.TempDir(), policy.StoreFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newAuditLog(store, 0, DefaultAuditInterval, zap.NewNop())
	// As add leaves them for a full batch, without the writer running.
	a.mu.Lock()
	for i := range auditBatch {
		a.pending = append(a.pending, policy.AuditEntry{App: "notes", Tool: "t", CallID: fmt.Sprint(i), Outcome: "ok"})
	}
	a.wake <- struct{}{}
	a.full <- struct{}{}
	a.mu.Unlock()
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	if len(a.wake) != 0 || len(a.full) != 0 {
		t.Fatalf("after the flush: %d wake and %d full signals left for entries written already", len(a.wake), len(a.full))
	}
	a.add(policy.AuditEntry{App: "notes", Tool: "t", CallID: fmt.Sprint(auditBatch), Outcome: "ok"})
	a.close()
	got, err := store.Audit("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != auditBatch+1 {
		t.Fatalf("%d entries written, want %d", len(got), auditBatch+1)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || e.CallID != fmt.Sprint(i) {
			t.Fatalf("entry %d is seq %d, call %s: want seq %d, call %d", i, e.Seq, e.CallID, i+1, i)
		}
	}
}
