package supervisor

import (
	"strings"
	"testing"
	"time"

	"octosup/policy"
)

// fakeClock is the injected clock of the restart policy tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func TestRestartPolicy(t *testing.T) {
	crash := Exit{Kind: ExitSignal, Code: -1, Signal: "SIGSEGV", SignalNumber: 11}
	rtKill := Exit{Kind: ExitSignal, Code: -1, Signal: "SIGRTMIN+2", SignalNumber: 36}
	type step struct {
		ran     time.Duration // how long the process lived before exiting
		exit    Exit
		restart bool
		delay   time.Duration
		fail    string // substring of the reason when it gives up
	}
	for _, tc := range []struct {
		name  string
		mode  policy.RestartPolicy
		steps []step
	}{
		{"on-request never restarts", policy.RestartOnRequest, []step{
			{ran: 0, exit: crash}, {ran: 0, exit: Exit{Kind: ExitStatus, Code: 1}},
		}},
		{"empty mode is on-request", "", []step{{exit: crash}}},
		{"clean exit stays stopped", policy.RestartOnFailure, []step{{exit: Exit{Kind: ExitStatus, Code: 0}}}},
		{"a real-time signal is a failure", policy.RestartOnFailure, []step{
			{exit: rtKill, restart: true, delay: 100 * time.Millisecond},
		}},
		{"a lost status is a failure", policy.RestartOnFailure, []step{
			{exit: lostExit(time.Time{}), restart: true, delay: 100 * time.Millisecond},
		}},
		{"crash loop: backoff, then start limit", policy.RestartOnFailure, []step{
			{exit: crash, restart: true, delay: 100 * time.Millisecond},
			{exit: Exit{Kind: ExitStatus, Code: 3}, restart: true, delay: 200 * time.Millisecond},
			{exit: crash, restart: true, delay: 400 * time.Millisecond},
			{exit: crash, restart: true, delay: 800 * time.Millisecond},
			{exit: crash, fail: "start limit hit: 5 starts within 10s"},
		}},
		{"slow crashes back off to the cap, never hit the limit", policy.RestartOnFailure, []step{
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 100 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 200 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 400 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 800 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 1600 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 3200 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 6400 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 12800 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 25600 * time.Millisecond},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 30 * time.Second},
			{ran: 2 * time.Second, exit: crash, restart: true, delay: 30 * time.Second},
		}},
		{"a long run resets the backoff", policy.RestartOnFailure, []step{
			{exit: crash, restart: true, delay: 100 * time.Millisecond},
			{exit: crash, restart: true, delay: 200 * time.Millisecond},
			{ran: 10 * time.Second, exit: crash, restart: true, delay: 100 * time.Millisecond},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1_000_000, 0)}
			p := newRestartPolicy(tc.mode)
			p.Started(clock.Now(), tc.mode)
			for i, s := range tc.steps {
				clock.Advance(s.ran)
				d := p.Exited(s.exit, s.ran, clock.Now())
				switch {
				case s.fail != "":
					if !d.fail || d.restart || !strings.Contains(d.reason, s.fail) {
						t.Fatalf("step %d: %+v, want failure %q", i, d, s.fail)
					}
					return
				case d.restart != s.restart || d.fail || (s.restart && d.delay != s.delay):
					t.Fatalf("step %d: %+v, want restart %v after %s", i, d, s.restart, s.delay)
				}
				if !d.restart {
					continue
				}
				clock.Advance(d.delay)
				p.Started(clock.Now(), tc.mode)
			}
		})
	}
}

func TestRestartPolicyResetAndWindow(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	p := newRestartPolicy(policy.RestartOnFailure)
	for range startBurst {
		p.Started(clock.Now(), policy.RestartOnFailure)
	}
	if d := p.Exited(Exit{Kind: ExitStatus, Code: 1}, 0, clock.Now()); !d.fail {
		t.Fatalf("%d starts at once: %+v, want the limit", startBurst, d)
	}
	// A start by request forgets the history.
	p.Reset()
	p.Started(clock.Now(), policy.RestartOnFailure)
	if d := p.Exited(Exit{Kind: ExitStatus, Code: 1}, 0, clock.Now()); !d.restart || d.delay != backoffInitial {
		t.Fatalf("after reset: %+v", d)
	}
	// Starts older than the window do not count.
	p.Reset()
	for range startBurst {
		p.Started(clock.Now(), policy.RestartOnFailure)
	}
	clock.Advance(startInterval)
	if d := p.Exited(Exit{Kind: ExitStatus, Code: 1}, startInterval, clock.Now()); !d.restart {
		t.Fatalf("starts outside the window counted: %+v", d)
	}
	// The policy of the entry at start time applies.
	p.Started(clock.Now(), policy.RestartOnRequest)
	if d := p.Exited(Exit{Kind: ExitStatus, Code: 1}, 0, clock.Now()); d.restart || d.fail {
		t.Fatalf("entry changed to on-request: %+v", d)
	}
}

func TestCheckMove(t *testing.T) {
	all := []State{Starting, Running, Stopping, Stopped, Failed}
	legal := map[[2]State]bool{
		{Starting, Starting}: true, {Starting, Running}: true, {Starting, Failed}: true, {Starting, Stopped}: true,
		{Running, Stopping}: true, {Running, Stopped}: true, {Running, Failed}: true,
		{Stopping, Stopped}: true,
		{Stopped, Starting}: true, {Stopped, Stopped}: true, {Stopped, Failed}: true,
		{Failed, Starting}: true,
	}
	for _, from := range all {
		for _, to := range all {
			err := checkMove(from, to)
			if (err == nil) != legal[[2]State{from, to}] {
				t.Errorf("checkMove(%s, %s) = %v", from, to, err)
			}
		}
	}
}
