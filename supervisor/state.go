package supervisor

import (
	"fmt"
	"time"
)

// State is where an app is in its life (SPEC §6).
type State string

const (
	// Starting: the process is being forked and its jail applied.
	Starting State = "starting"
	// Running: the app's program is executing.
	Running State = "running"
	// Stopping: SIGTERM was sent to the app's group; SIGKILL follows after
	// the grace period.
	Stopping State = "stopping"
	// Stopped: no process; LastExit says how the last one ended.
	Stopped State = "stopped"
	// Failed: the app could not be started (or hit its start limit);
	// Reason says why.
	Failed State = "failed"
)

// Exit is how an app's process ended.
type Exit struct {
	Code   int       `json:"code"`             // exit status, when it exited
	Signal string    `json:"signal,omitempty"` // e.g. "SIGKILL", when a signal ended it
	At     time.Time `json:"at"`
}

func (e Exit) String() string {
	if e.Signal != "" {
		return fmt.Sprintf("signal %s", e.Signal)
	}
	return fmt.Sprintf("exit %d", e.Code)
}

// Clean reports whether the process exited with status 0.
func (e Exit) Clean() bool { return e.Signal == "" && e.Code == 0 }

// checkMove reports whether from → to is a legal move; anything else is
// a bug in the supervisor. A crashed app goes from running to stopped (or
// to failed when its restart policy gives up); stopped to stopped is an
// update of Reason (a scheduled restart, or its cancellation).
func checkMove(from, to State) error {
	ok := false
	switch from {
	case Starting:
		ok = to == Running || to == Failed
	case Running:
		ok = to == Stopping || to == Stopped || to == Failed
	case Stopping:
		ok = to == Stopped
	case Stopped:
		ok = to == Starting || to == Stopped || to == Failed
	case Failed:
		ok = to == Starting
	}
	if !ok {
		return fmt.Errorf("illegal state change %s → %s (a supervisor bug)", from, to)
	}
	return nil
}
