package jail

import (
	"testing"
	"time"
)

// TestBudget: a guard spends its burst at once, then a tenth of the time
// that passes; what it overspends is paid back by a pause ten times as
// long.
func TestBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		steps []struct{ at, used, wait time.Duration }
	}{
		{"a burst within the credit", []struct{ at, used, wait time.Duration }{{0, 100 * ms, 0}, {ms, 99 * ms, 0}}},
		{"past the burst, a pause", []struct{ at, used, wait time.Duration }{{0, 150 * ms, 0}, {ms, 60 * ms, 99 * ms}}},
		{"the credit grows a tenth of the time", []struct{ at, used, wait time.Duration }{
			{0, 200 * ms, 0}, {100 * ms, 10 * ms, 0}, {200 * ms, 20 * ms, 100 * ms}}},
		{"never past the burst", []struct{ at, used, wait time.Duration }{
			{0, 0, 0}, {time.Hour, 200 * ms, 0}, {time.Hour, 10 * ms, 100 * ms}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b budget
			for i, s := range c.steps {
				if got := b.spend(t0.Add(s.at), s.used); got != s.wait {
					t.Fatalf("step %d: wait %s, want %s", i, got, s.wait)
				}
			}
		})
	}
}
