package peer

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"octosup/policy"
)

// maxAuditPending bounds the entries waiting; past it they are dropped and
// counted: a store that cannot keep up must not grow the daemon.
const maxAuditPending = 1 << 16

// auditBatch: a batch is written AuditInterval after its first entry, or
// once auditBatch wait. Each is one fsync'd transaction (with the trim), so
// a busy daemon pays the disk per batch, not per call. The interval bounds
// what a SIGKILL loses; the trail is a record, not a decision (consent and
// rules are fsync'd before they are acted on).
const auditBatch = 1024

// DefaultAuditInterval is Config.AuditInterval's default.
const DefaultAuditInterval = 50 * time.Millisecond

// auditLog writes finished calls to the store in batches. One goroutine
// (loop, from newAuditLog to close) does every write, in order, with no
// lock held across it.
type auditLog struct {
	store    Store
	keep     int
	interval time.Duration
	log      *zap.Logger

	mu      sync.Mutex // guards the three below
	pending []policy.AuditEntry
	dropped int
	closed  bool

	kick    chan struct{}   // a batch began or filled (capacity 1)
	flushes chan chan error // Audit's
	stop    chan struct{}
	done    chan struct{} // loop returned
}

func newAuditLog(store Store, keep int, interval time.Duration, log *zap.Logger) *auditLog {
	a := &auditLog{store: store, keep: keep, interval: interval, log: log,
		kick: make(chan struct{}, 1), flushes: make(chan chan error),
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// add queues an entry without blocking.
func (a *auditLog) add(e policy.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= maxAuditPending {
		a.dropped++
		return
	}
	a.pending = append(a.pending, e)
	if a.closed {
		return // close's last write, or the next Audit, writes it
	}
	if n := len(a.pending); n == 1 || n >= auditBatch {
		select {
		case a.kick <- struct{}{}:
		default: // the loop will look
		}
	}
}

// loop writes a batch when due, full or asked for, and the rest when
// stopped. The timer runs only while a batch waits: an idle daemon sleeps.
func (a *auditLog) loop() {
	defer close(a.done)
	timer := time.NewTimer(a.interval)
	timer.Stop()
	armed := false
	for {
		select {
		case <-a.kick:
			// A kick left from entries written since is no batch.
			a.mu.Lock()
			n := len(a.pending)
			a.mu.Unlock()
			switch {
			case n >= auditBatch:
				a.write()
			case n > 0 && !armed:
				timer.Reset(a.interval)
				armed = true
			}
		case <-timer.C:
			armed = false
			a.write()
		case reply := <-a.flushes:
			reply <- a.write()
		case <-a.stop:
			a.write()
			return
		}
	}
}

// flush writes what is pending, by the loop, or here once it ended. A
// failure loses the entries (logged and returned): the trail must not
// hold the daemon back.
func (a *auditLog) flush() error {
	reply := make(chan error, 1)
	select {
	case a.flushes <- reply:
		return <-reply
	case <-a.done:
		return a.write()
	}
}

func (a *auditLog) write() error {
	a.mu.Lock()
	batch, dropped := a.pending, a.dropped
	a.pending, a.dropped = nil, 0
	a.mu.Unlock()
	if dropped > 0 {
		a.log.Error("audit entries dropped: the store did not keep up", zap.Int("dropped", dropped))
	}
	if len(batch) == 0 {
		return nil
	}
	err := a.store.AppendAudit(batch, a.keep)
	if err != nil {
		a.log.Error("write the audit trail", zap.Int("entries", len(batch)), zap.Error(err))
	}
	return err
}

// close stops the loop after a last write: every entry added before is on
// disk when it returns.
func (a *auditLog) close() {
	a.mu.Lock()
	closed := a.closed
	a.closed = true
	a.mu.Unlock()
	if !closed {
		close(a.stop)
	}
	<-a.done
	a.write() // what was added while the loop wrote its last
}
