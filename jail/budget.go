package jail

import "time"

// The guard's work is the daemon's CPU, not the app's: a jail app that
// called inotify_add_watch in a loop spent 1 s of its own CPU and 3.3 s
// of the daemon's over 5 s, outside its cpu_max. A budget holds each
// app's guard to a share of one CPU: once the guard has spent more than
// its credit, it stops taking the app's calls until the credit is back,
// and the app's notified calls wait in the kernel meanwhile (they are
// the app's to wait on, as a slow disk would be).

const (
	// guardShare is the share of one CPU an app's guard may use over
	// time: 10%.
	guardShare = 0.1
	// guardBurst is the credit a guard may spend at once after a quiet
	// while: an app that places a few thousand watches at its start (a
	// file manager) is not slowed.
	guardBurst = 200 * time.Millisecond
)

// budget is one guard's credit. Not safe for concurrent use: the guard's
// Serve goroutine alone uses it.
type budget struct {
	credit time.Duration
	last   time.Time
}

// spend records work that took used, ending at now, and returns how long
// the guard must pause before it takes the next call (0: none).
func (b *budget) spend(now time.Time, used time.Duration) time.Duration {
	if b.last.IsZero() {
		b.credit = guardBurst
	} else {
		b.credit += time.Duration(float64(now.Sub(b.last)) * guardShare)
	}
	b.credit = min(b.credit, guardBurst) - used
	b.last = now
	if b.credit >= 0 {
		return 0
	}
	return time.Duration(float64(-b.credit) / guardShare)
}
