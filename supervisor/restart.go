package supervisor

import (
	"fmt"
	"time"

	"octosup/policy"
)

// The numbers of the on-failure policy (see doc.go). They mirror systemd's
// defaults for StartLimitBurst and StartLimitIntervalSec so that an app
// that crashes at once is given up on within a few seconds instead of
// spinning forever.
const (
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 30 * time.Second
	// backoffReset is how long a process must have run for its exit not to
	// count as part of a crash loop: the next delay starts again from
	// backoffInitial.
	backoffReset  = 10 * time.Second
	startBurst    = 5
	startInterval = 10 * time.Second
)

// decision is what the restart policy says about one exit.
type decision struct {
	restart bool          // start again after delay
	delay   time.Duration // only with restart
	fail    bool          // give up: the app becomes failed with reason
	reason  string
}

// restartPolicy decides what happens after an app's process ends on its
// own. It is a plain object without goroutines or clock of its own: the
// caller passes the time, so tests drive it with a fake clock. One app's
// runner owns it; it is not safe for concurrent use.
type restartPolicy struct {
	mode policy.RestartPolicy

	initial, max, reset time.Duration
	burst               int
	interval            time.Duration

	starts   []time.Time // starts within the last interval, oldest first
	failures int         // consecutive failed exits, for the backoff
}

func newRestartPolicy(mode policy.RestartPolicy) *restartPolicy {
	return &restartPolicy{
		mode:     mode,
		initial:  backoffInitial,
		max:      backoffMax,
		reset:    backoffReset,
		burst:    startBurst,
		interval: startInterval,
	}
}

// Reset forgets the app's history: a person asked for a start, which is
// systemd's "reset-failed" plus "start".
func (p *restartPolicy) Reset() {
	p.starts = p.starts[:0]
	p.failures = 0
}

// Started records a start of the app's process at now, and which policy
// the entry had then (an edited entry takes effect at its next start).
func (p *restartPolicy) Started(now time.Time, mode policy.RestartPolicy) {
	p.mode = mode
	p.prune(now)
	p.starts = append(p.starts, now)
}

// Exited decides what follows an exit the supervisor did not ask for. ran
// is how long the process lived.
func (p *restartPolicy) Exited(exit Exit, ran time.Duration, now time.Time) decision {
	if p.mode != policy.RestartOnFailure || exit.Clean() {
		return decision{}
	}
	if ran >= p.reset {
		p.failures = 0
	}
	p.failures++
	delay := p.initial
	for i := 1; i < p.failures && delay < p.max; i++ {
		delay *= 2
	}
	delay = min(delay, p.max)
	// The next start would happen at now+delay: refuse it if the window
	// ending there already holds burst starts.
	p.prune(now.Add(delay))
	if len(p.starts) >= p.burst {
		return decision{fail: true, reason: fmt.Sprintf(
			"start limit hit: %d starts within %s, last %s; fix the app, then start it by hand",
			len(p.starts), p.interval, exit)}
	}
	return decision{restart: true, delay: delay, reason: fmt.Sprintf(
		"%s; restarting in %s (on-failure)", exit, delay)}
}

// prune drops starts that fall out of the window ending at t.
func (p *restartPolicy) prune(t time.Time) {
	cut := t.Add(-p.interval)
	i := 0
	for i < len(p.starts) && !p.starts[i].After(cut) {
		i++
	}
	p.starts = append(p.starts[:0], p.starts[i:]...)
}
