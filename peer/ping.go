package peer

import (
	"context"
	"fmt"
	"time"
)

// Ping returns nil once the Manager's lock, which every link, the kernel
// and every approval take for each step, was had within ctx: the
// daemon's watchdog pings systemd only then. It takes the lock by tries,
// not by waiting on it, so that a wedged Manager leaves no goroutine
// behind.
func (m *Manager) Ping(ctx context.Context) error {
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if m.mu.TryLock() {
			m.mu.Unlock()
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the peer links' lock was not free within the watchdog's bound: a link, the kernel or an approval is stuck holding it")
		}
	}
}
