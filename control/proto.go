package control

import (
	"encoding/json"
	"fmt"
	"time"
)

// MaxLine caps a control-socket line in either direction; a longer
// request is answered bad_request and skipped to its newline.
const MaxLine = 1 << 20

// Request is one line from a client: {"id": N, "op": "...", "args": {...}}.
type Request struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers exactly one Request. ID 0 (about the connection, or
// a line without a usable id) is written and read as "id": null.
type Response struct {
	ID    int64           `json:"id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// MarshalJSON writes ID 0 as null: no request has id 0, and a client
// must not take the answer for one that does.
func (r Response) MarshalJSON() ([]byte, error) {
	type plain Response
	b, err := json.Marshal(plain(r))
	if err != nil || r.ID != 0 {
		return b, err
	}
	return append([]byte(`{"id":null`), b[len(`{"id":0`):]...), nil
}

// Error is the error member of a failed Response, and a Go error the
// client returns as is; callers branch on Code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Data carries details for a program, e.g. ManifestProblems for
	// invalid_manifest.
	Data json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error codes of the control socket. Where an op relays the peer link's
// codes (docs/protocol.md), they are used as they are.
const (
	CodeBadRequest      = "bad_request"      // the line is not a request, or its args are wrong
	CodeUnknownOp       = "unknown_op"       // no such op
	CodeUnknownApp      = "unknown_app"      // no app with that id in the manifest
	CodeInvalidManifest = "invalid_manifest" // reload refused: the manifest has errors
	CodeFailed          = "failed"           // the app could not reach the asked state
	CodeNotPermitted    = "not_permitted"    // the peer may not use the control socket
	CodeInternal        = "internal"
)

// Ops of the control socket (docs/control.md).
const (
	OpStatus    = "status"
	OpStart     = "start"
	OpStop      = "stop"
	OpRestart   = "restart"
	OpLogs      = "logs"
	OpSubscribe = "subscribe"
	OpReload    = "reload"
	OpHello     = "hello"
)

// The protocol hello names. Version moves only for a change that could
// break a client of the one before (docs/control.md, "Versions");
// additions show in hello's ops and topics.
const (
	ProtocolName    = "octosup-control"
	ProtocolVersion = 1
)

// HelloData is hello's data; Ops and Topics are those served, sorted.
type HelloData struct {
	Protocol string   `json:"protocol"`
	Version  int      `json:"version"`
	Ops      []string `json:"ops"`
	Topics   []string `json:"topics"`
	MaxLine  int      `json:"max_line"`
}

// Event topics a subscriber may ask for. TopicLog comes only from logs
// with follow.
const (
	TopicState    = "state"
	TopicApproval = "approval"
	TopicAppFrame = "app.frame"
	TopicLog      = "log"
)

// Args of the ops (DecodeArgs refuses unknown members), and their data.

// StatusArgs are status's args; App "" means every app. Usage asks for
// each running app's usage, read now: a few files an app, which a status
// of many apps otherwise does not read.
type StatusArgs struct {
	App   string `json:"app,omitempty"`
	Usage bool   `json:"usage,omitempty"`
}

// AppArgs are the args of start, stop and restart.
type AppArgs struct {
	App string `json:"app"`
}

// LogsArgs are logs's args. Lines <= 0 means the daemon's default.
type LogsArgs struct {
	App    string `json:"app"`
	Lines  int    `json:"lines,omitempty"`
	Follow bool   `json:"follow,omitempty"`
}

// ReloadArgs are reload's args.
type ReloadArgs struct {
	// KeepRunning leaves running apps whose entry changed as they are
	// instead of restarting them; status marks them stale (AppStatus.Stale).
	KeepRunning bool `json:"keep_running,omitempty"`
}

// SubscribeArgs are subscribe's args; no topics means TopicState.
type SubscribeArgs struct {
	Topics []string `json:"topics,omitempty"`
}

// StatusData is status's data: the apps, and the daemon's state store.
type StatusData struct {
	Apps  []AppStatus  `json:"apps"`
	Store *StoreStatus `json:"store,omitempty"`
}

// StoreStatus is the health of the daemon's state store (consent, rules,
// sessions, audit trail): how it was found at start and what could not be
// written since. Notes says it all for a person, a line each (none when
// healthy).
type StoreStatus struct {
	// Path is the state file, or a temporary one when Temporary says why.
	Path    string   `json:"path"`
	Healthy bool     `json:"healthy"`
	Notes   []string `json:"notes"`
	// Damage is what was wrong with the state file at start.
	Damage *StoreDamage `json:"damage,omitempty"`
	// Temporary is why this run keeps its state in a file of its own,
	// lost when the daemon stops.
	Temporary string `json:"temporary,omitempty"`
	// Restored is where the content came from at start, when not from the
	// state file.
	Restored *StoreRestored `json:"restored,omitempty"`
	// AuditDropped counts audit entries not written since start;
	// AuditError is the last such write's error.
	AuditDropped int    `json:"audit_dropped,omitempty"`
	AuditError   string `json:"audit_error,omitempty"`
	// BackupError is why the last good copy could not be written.
	BackupError string `json:"backup_error,omitempty"`
}

// StoreDamage is a state file found damaged at start: moved aside to
// MovedTo, or left in place (MoveError).
type StoreDamage struct {
	At        time.Time `json:"at"`
	Problem   string    `json:"problem"`
	MovedTo   string    `json:"moved_to,omitempty"`
	MoveError string    `json:"move_error,omitempty"`
}

// StoreRestored is what the store started from: the good copy From,
// written at At; or, From empty, nothing (nothing is granted; Problem
// says why no good copy was used).
type StoreRestored struct {
	From    string    `json:"from,omitempty"`
	At      time.Time `json:"at,omitzero"`
	Problem string    `json:"problem,omitempty"`
}

// AppStatus is one app in status.
type AppStatus struct {
	ID       string      `json:"id"`
	State    string      `json:"state"`
	Pid      int         `json:"pid,omitempty"`
	Restarts int         `json:"restarts"`
	Since    time.Time   `json:"since"`
	LastExit *Exit       `json:"last_exit,omitempty"`
	Reason   string      `json:"reason,omitempty"`
	Jail     *JailReport `json:"jail,omitempty"`
	// Stopper is how the app is stopped: "cgroup" or "process-group".
	Stopper string     `json:"stopper,omitempty"`
	Link    LinkStatus `json:"link"`
	// Stale names what of the entry changed since the process started
	// (as AppChange.Changed) when a reload with keep_running left it
	// running its old entry. Absent otherwise.
	Stale []string `json:"stale,omitempty"`
	// Limits says which of the entry's limits hold the process (since it
	// last started); Usage is what its cgroup counts now, when asked
	// (docs/limits.md).
	Limits *LimitsReport `json:"limits,omitempty"`
	Usage  *Usage        `json:"usage,omitempty"`
}

// LimitsReport says which of an app's limits took: Limiter "cgroup",
// "prlimit", "cgroup+prlimit" or "none"; Applied as name=value; Missing
// the asked-for limits nothing enforces ("limits.memory").
type LimitsReport struct {
	Limiter string   `json:"limiter"`
	Applied []string `json:"applied"`
	Missing []string `json:"missing"`
}

// Usage is what an app's cgroup counts: memory from the memory
// controller where the daemon has it, else MemoryRSS, the resident sets
// of the app's processes added up.
type Usage struct {
	CPUUsec       uint64    `json:"cpu_usec"`
	MemoryCurrent uint64    `json:"memory_current,omitempty"`
	MemoryPeak    uint64    `json:"memory_peak,omitempty"`
	MemoryRSS     uint64    `json:"memory_rss,omitempty"`
	Tasks         int       `json:"tasks"`
	At            time.Time `json:"at"`
}

// Exit is how an app's last process ended. OOM is set when the kernel
// OOM-killed a process of it, saying what for: "memory_max 512M".
type Exit struct {
	Code   int       `json:"code"`
	Signal string    `json:"signal,omitempty"`
	At     time.Time `json:"at"`
	OOM    string    `json:"oom,omitempty"`
}

func (e Exit) String() string {
	if e.OOM != "" {
		return "oom-killed (" + e.OOM + ")"
	}
	if e.Signal != "" {
		return "signal " + e.Signal
	}
	return fmt.Sprintf("exit %d", e.Code)
}

// JailReport says which jail layers took for an app's process, and the
// desktop sockets and devices it was given.
type JailReport struct {
	LandlockABI int      `json:"landlock_abi"`
	Layers      []string `json:"layers"`
	Missing     []string `json:"missing"`
	Grants      []Grant  `json:"grants,omitempty"`
}

// Grant is one desktop socket or device of an app: Name as in its entry
// (wayland, pulseaudio, dri), Path what it reaches, Via how:
// "guard-connect" (the daemon connects for the app: the server sees the
// daemon, and a compositor gives the app no security context),
// "pulse-filter" (to the daemon's sound filter, which passes playing and
// recording and refuses modules), "landlock" (a render node, read-write
// with its ioctls), or "no-render-node" (dri on a machine without one).
type Grant struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	Via  string `json:"via"`
}

// LinkStatus is the state of an app's peer link.
type LinkStatus struct {
	Connected        bool `json:"connected"`
	Contexts         int  `json:"contexts"`
	OutstandingCalls int  `json:"outstanding_calls"`
}

// StateData is the data of start, stop and restart: the state reached,
// and the app's status.
type StateData struct {
	State string    `json:"state"`
	App   AppStatus `json:"app"`
}

// LogsData is logs's data, oldest first. Truncated: fewer lines than
// asked for, because they did not fit in one line.
type LogsData struct {
	Lines     []LogLine `json:"lines"`
	Truncated bool      `json:"truncated,omitempty"`
}

// LogLine is one line an app wrote; it is also the body of a log event.
type LogLine struct {
	App    string    `json:"app"`
	Stream string    `json:"stream"` // "stdout" or "stderr"
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
}

// StateEvent is the body of a state event: an app moved to State.
type StateEvent struct {
	App      string    `json:"app"`
	State    string    `json:"state"`
	Pid      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
	LastExit *Exit     `json:"last_exit,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Warning is set on an event that is not a change of state: the app
	// hit a limit ("tasks_max reached (512): …"), once per episode.
	Warning string `json:"warning,omitempty"`
}

// SubscribeData is subscribe's data: the topics now delivered.
type SubscribeData struct {
	Topics []string `json:"topics"`
}

// ReloadData is reload's data: the new manifest's number of apps and what
// the reload did, each list in manifest order (empty, never absent).
type ReloadData struct {
	Apps int `json:"apps"`
	// Added (started when autostart) and Removed (stopped) apps.
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	// Restarted are the running apps whose entry changed, restarted to
	// run the new one; Stale those keep_running left on their old entry.
	Restarted []AppChange `json:"restarted"`
	Stale     []AppChange `json:"stale"`
	// Limits are the running apps whose changed limits took in place,
	// with no restart (docs/limits.md).
	Limits []string `json:"limits"`
}

// AppChange is one running app a reload found running an old entry.
type AppChange struct {
	App string `json:"app"`
	// Changed names what differs, of "jail" (what the jail enforces),
	// "exec", "argv", "environment" and "directory", in that order.
	Changed []string `json:"changed"`
	// State, Pid and Reason are where the restart left the app (failed,
	// with the reason, when the new entry cannot start); for a stale app,
	// its state then.
	State  string `json:"state"`
	Pid    int    `json:"pid,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ManifestProblems is the Data of an invalid_manifest error.
type ManifestProblems struct {
	Problems []string `json:"problems"`
}

// EncodeEvent returns the line {"event": topic, ...body's members} for a
// body that marshals to an object, else {"event": topic, "data": body};
// no trailing newline.
func EncodeEvent(topic string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", topic, err)
	}
	name, _ := json.Marshal(topic)
	line := make([]byte, 0, len(b)+len(name)+16)
	line = append(append(line, `{"event":`...), name...)
	if b[0] != '{' {
		line = append(append(line, `,"data":`...), b...)
		return append(line, '}'), nil
	}
	// json.Marshal's output is compact: "{}" is the only empty object.
	if len(b) > 2 {
		line = append(line, ',')
	}
	return append(line, b[1:]...), nil
}

// Event is an event line received: Name is its "event" member, Raw the
// whole line.
type Event struct {
	Name string
	Raw  json.RawMessage
}

// Decode unmarshals the event's line into v (a struct that does not name
// "event" ignores it).
func (e Event) Decode(v any) error { return json.Unmarshal(e.Raw, v) }
