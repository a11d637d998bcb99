package supervisor

// EventKind is what an Event is about.
type EventKind string

const (
	// KindState: an app's state changed (Event.State is set).
	KindState EventKind = "state"
	// KindLog: an app printed a line (Event.Log is set).
	KindLog EventKind = "log"
	// KindWarning: an app ran into one of its limits (Event.Warning says
	// which, Event.State is its status then); once per episode.
	KindWarning EventKind = "warning"
)

// Event is one thing that happened: a state change of an app (Kind
// KindState, State set), a line of its output (Kind KindLog, Log set) or
// a limit it reached (Kind KindWarning, State and Warning set).
type Event struct {
	Kind    EventKind
	State   *AppStatus
	Log     *LogLine
	Warning string
}
