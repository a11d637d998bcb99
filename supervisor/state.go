package supervisor

import (
	"fmt"
	"time"
)

// State is where an app is in its life (docs/spec.md, "Lifecycle").
type State string

const (
	// Starting: the process is being forked and its jail applied;
	// AppStatus.Pid is set once the fork is done.
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

// ExitKind says how a process ended.
type ExitKind string

const (
	// ExitStatus: the process exited; Exit.Code is its status.
	ExitStatus ExitKind = "exited"
	// ExitSignal: a signal ended the process; Exit.Signal names it and
	// Exit.Code is -1.
	ExitSignal ExitKind = "signaled"
	// ExitUnknown: the status was lost (waitid failed); Exit.Code is -1.
	ExitUnknown ExitKind = "unknown"
)

// Exit is how an app's process ended. Code is meaningful only for Kind
// "exited"; for a signal death (and a lost status) it is -1, never 0, so
// that a reader that looks at the code alone cannot take a killed app for
// a clean exit.
type Exit struct {
	Kind ExitKind `json:"kind"`
	Code int      `json:"code"`
	// Signal names the signal that ended the process: "SIGKILL", or for
	// the real-time signals, which have no name, "SIGRTMIN+N".
	Signal       string    `json:"signal,omitempty"`
	SignalNumber int       `json:"signal_number,omitempty"`
	CoreDumped   bool      `json:"core_dumped,omitempty"`
	At           time.Time `json:"at"`
	// OOM is set when the kernel OOM-killed a process of the app (its
	// leaf's memory.events), even one the app outlived: what it is put
	// down to, "memory_max 512M". Such an exit is never clean.
	OOM string `json:"oom,omitempty"`
}

func (e Exit) String() string {
	if e.OOM != "" {
		return "oom-killed (" + e.OOM + ")"
	}
	switch e.Kind {
	case ExitStatus:
		return fmt.Sprintf("exit %d", e.Code)
	case ExitSignal:
		if e.CoreDumped {
			return fmt.Sprintf("signal %s (core dumped)", e.Signal)
		}
		return fmt.Sprintf("signal %s", e.Signal)
	}
	return "exit status unknown"
}

// Clean reports whether the process exited with status 0.
func (e Exit) Clean() bool { return e.Kind == ExitStatus && e.Code == 0 && e.OOM == "" }

// checkMove reports whether from → to is a legal move; anything else is
// a bug in the supervisor. A crashed app goes from running to stopped (or
// to failed when its restart policy gives up); stopped to stopped is an
// update of Reason (a scheduled restart, or its cancellation).
func checkMove(from, to State) error {
	ok := false
	switch from {
	case Starting:
		// starting → starting records the pid once it is known;
		// starting → stopped is a start cancelled by Stop, a removal or
		// shutdown.
		ok = to == Starting || to == Running || to == Failed || to == Stopped
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
