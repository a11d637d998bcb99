package peer

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"octosup/policy"
)

// maxAuditPending bounds the audit entries waiting to be written; past it
// entries are dropped and counted (a store that cannot keep up must not
// grow the daemon).
const maxAuditPending = 1 << 16

// The audit trail is written in batches: a batch is written
// Config.AuditInterval (DefaultAuditInterval) after its first entry, or as soon as auditBatch entries are waiting.
// Each batch is one fsync'd transaction (with the trim), so a busy daemon
// pays for the disk once per batch, not once per call, and at one call in
// flight the writer wakes once per interval, not once per call. The
// interval bounds what a SIGKILL of the daemon loses: the entries of the
// last batch not yet written (a clean stop writes them, see close). The
// trail is a record, not a decision: consent and rules are written and
// fsync'd before they are acted on, elsewhere.
const auditBatch = 1024

// DefaultAuditInterval is Config.AuditInterval's default.
const DefaultAuditInterval = 50 * time.Millisecond

// auditLog writes finished calls to the store in batches. Its writer
// goroutine starts with the first entry and ends in close.
type auditLog struct {
	store    *policy.Store
	keep     int
	interval time.Duration
	log      *zap.Logger

	mu      sync.Mutex
	pending []policy.AuditEntry
	dropped int
	running bool
	closed  bool
	wake    chan struct{} // an entry is waiting
	full    chan struct{} // auditBatch entries are waiting
	stop    chan struct{}
	done    chan struct{}

	// writes runs one batch at a time, in order, with no lock held
	// across the store's write.
	writes serial
	spare  []policy.AuditEntry // owned by writes: the last batch's array, emptied, for the next pending
}

func newAuditLog(store *policy.Store, keep int, interval time.Duration, log *zap.Logger) *auditLog {
	return &auditLog{store: store, keep: keep, interval: interval, log: log,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// add queues an entry. It never blocks.
func (a *auditLog) add(e policy.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= maxAuditPending {
		a.dropped++
		return
	}
	a.pending = append(a.pending, e)
	if a.closed {
		return // close's last flush, or the next Audit, writes it
	}
	if !a.running {
		a.running = true
		go a.loop()
	}
	signal := a.wake
	if len(a.pending) >= auditBatch {
		signal = a.full
	}
	select {
	case signal <- struct{}{}:
	default:
	}
}

func (a *auditLog) loop() {
	defer close(a.done)
	t := time.NewTimer(a.interval)
	t.Stop()
	for {
		// Wait for a batch's first entry, then for the interval or a
		// full batch.
		select {
		case <-a.wake:
			t.Reset(a.interval)
			select {
			case <-t.C:
			case <-a.full:
				t.Stop()
			case <-a.stop:
				t.Stop()
				a.flush()
				return
			}
		case <-a.full:
		case <-a.stop:
			a.flush()
			return
		}
		a.flush()
		// flush took the signals of the entries it wrote: the next
		// round waits for an entry added after it.
	}
}

// flush writes what is pending; a failure is logged and returned (the
// entries are lost: the trail must not hold the daemon back).
func (a *auditLog) flush() error {
	var err error
	a.writes.call(func() { err = a.write() })
	return err
}

// write is flush on the writes serial.
func (a *auditLog) write() error {
	a.mu.Lock()
	batch, dropped := a.pending, a.dropped
	// The entries are copied into the store's transaction: the batch's
	// array takes the next entries, not a new one grown by appends.
	a.pending, a.dropped, a.spare = a.spare, 0, nil
	// The signals sent so far are for the entries taken now (add sends
	// them under a.mu); the next entry sends its own. Left in their
	// channels, a full sent while the loop was on its way here made
	// the next round write at once the few entries added during this
	// write: at a high rate every other transaction was ~150 entries,
	// not auditBatch, and cost nearly as much.
	for _, c := range []chan struct{}{a.wake, a.full} {
		select {
		case <-c:
		default:
		}
	}
	a.mu.Unlock()
	if dropped > 0 {
		a.log.Error("audit entries dropped: the store did not keep up", zap.Int("dropped", dropped))
	}
	err := a.store.AppendAudit(batch, a.keep)
	if cap(batch) <= 4*auditBatch { // a backlog's array is not kept
		clear(batch)
		a.spare = batch[:0]
	}
	if err != nil {
		a.log.Error("write the audit trail", zap.Int("entries", len(batch)), zap.Error(err))
		return err
	}
	return nil
}

// close stops the writer after a last flush: every entry added before
// close is on disk when it returns.
func (a *auditLog) close() {
	a.mu.Lock()
	running := a.running && !a.closed
	a.closed = true
	a.mu.Unlock()
	if running {
		close(a.stop)
		<-a.done
	}
	a.flush()
}
