package supervisor

import (
	"context"
	"fmt"
)

// Ping returns nil once the spawner thread and the goroutine of every app
// (its runner) have each answered within ctx: the daemon pings systemd's
// watchdog only then, so that a wedged part gets the daemon restarted.
// The error names each part that did not answer. Each part answers
// between two of its steps; a part in a bounded wait (a launch, a
// stop's drain, a LinkHandler call) answers after it.
func (s *Supervisor) Ping(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.closed {
		s.mu.Unlock()
		return fmt.Errorf("ping the supervisor: %w", ErrShutdown)
	}
	runners := make([]*runner, 0, len(s.apps)+len(s.removing))
	for _, id := range s.order {
		runners = append(runners, s.apps[id])
	}
	for r := range s.removing {
		runners = append(runners, r)
	}
	s.mu.Unlock()

	// Every runner is asked first, then each answer awaited: one wedged
	// runner does not keep the others from being asked.
	asked := make([]chan struct{}, len(runners))
	for i, r := range runners {
		asked[i] = make(chan struct{})
		select {
		case r.pings <- asked[i]:
		default:
			asked[i] = nil // the last ping is still unanswered
		}
	}
	var stuck []string
	if err := s.pingSpawner(ctx); err != nil {
		stuck = append(stuck, err.Error())
	}
	for i, r := range runners {
		if !answered(ctx, asked[i], r.done) {
			stuck = append(stuck, fmt.Sprintf("the runner of app %s (it starts, stops and reaps its processes) did not answer", r.id))
		}
	}
	if len(stuck) > 0 {
		return &StuckError{Parts: stuck}
	}
	return nil
}

// StuckError is Ping's error: the parts of the supervisor that did not
// answer.
type StuckError struct{ Parts []string }

func (e *StuckError) Error() string {
	msg := "supervisor is stuck: "
	for i, p := range e.Parts {
		if i > 0 {
			msg += "; "
		}
		msg += p
	}
	return msg
}

// answered waits for a ping's answer: ch closed, or the runner gone (it
// has nothing left to do). A nil ch was never asked: not answered.
func answered(ctx context.Context, ch <-chan struct{}, done <-chan struct{}) bool {
	if ch == nil {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	// An answer that came counts even once ctx is done: the spawner's
	// ping, awaited first, may have used all of ctx.
	select {
	case <-ch:
		return true
	case <-done:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// pingSpawner is a round trip through the spawner thread, which serves one
// launch at a time.
func (s *Supervisor) pingSpawner(ctx context.Context) error {
	reply := make(chan spawnResult, 1)
	select {
	case s.spawnReqs <- spawnRequest{ping: true, reply: reply}:
	case <-s.spawnerDone:
		return fmt.Errorf("the spawner thread has ended: %w", ErrShutdown)
	case <-ctx.Done():
		return fmt.Errorf("the spawner thread (it forks every app) did not take a ping: a launch is stuck")
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the spawner thread (it forks every app) did not answer a ping")
	}
}
