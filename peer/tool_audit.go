package peer

import (
	"sync"

	"go.uber.org/zap"

	"octosup/policy"
)

// maxAuditPending bounds the audit entries waiting to be written; past it
// entries are dropped and counted (a store that cannot keep up must not
// grow the daemon).
const maxAuditPending = 1 << 16

// auditLog writes finished calls to the store in batches: one fsync'd
// transaction for whatever piled up meanwhile, so that the trail costs a
// busy daemon one fsync per batch, not per call. Its writer goroutine
// starts with the first entry and ends in close.
type auditLog struct {
	store *policy.Store
	keep  int
	log   *zap.Logger

	mu      sync.Mutex
	pending []policy.AuditEntry
	dropped int
	running bool
	closed  bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	wmu sync.Mutex // one batch at a time, in order
}

func newAuditLog(store *policy.Store, keep int, log *zap.Logger) *auditLog {
	return &auditLog{store: store, keep: keep, log: log,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *auditLog) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.wake:
			a.flush()
		case <-a.stop:
			a.flush()
			return
		}
	}
}

// flush writes what is pending; a failure is logged and returned (the
// entries are lost: the trail must not hold the daemon back).
func (a *auditLog) flush() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.mu.Lock()
	batch, dropped := a.pending, a.dropped
	a.pending, a.dropped = nil, 0
	a.mu.Unlock()
	if dropped > 0 {
		a.log.Error("audit entries dropped: the store did not keep up", zap.Int("dropped", dropped))
	}
	if err := a.store.AppendAudit(batch, a.keep); err != nil {
		a.log.Error("write the audit trail", zap.Int("entries", len(batch)), zap.Error(err))
		return err
	}
	return nil
}

// close stops the writer after a last flush.
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
