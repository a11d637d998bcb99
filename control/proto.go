package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/internal/strictjson"
	"octosup/internal/suggest"
)

// MaxLine caps one control-socket line in either direction. A longer
// request is answered bad_request and skipped up to its newline.
const MaxLine = 1 << 20

// Request is one line from a client: {"id": N, "op": "...", "args": {...}}.
type Request struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers exactly one Request. An ID of 0 (the answer is about
// the connection, or about a line without a usable id) is written and
// read as "id": null.
type Response struct {
	ID    int64           `json:"id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// MarshalJSON writes the response, its ID 0 as null: no request has id
// 0, and a client must not take the answer for one that does.
func (r Response) MarshalJSON() ([]byte, error) {
	type plain Response
	b, err := json.Marshal(plain(r))
	if err != nil || r.ID != 0 {
		return b, err
	}
	return append([]byte(`{"id":null`), b[len(`{"id":0`):]...), nil
}

// Error is the error member of a failed Response. It is also a Go error,
// so the client returns it as is and callers branch on Code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Data carries details a program can use, e.g. the problems of a
	// refused manifest ({"problems": [...]}) for invalid_manifest.
	Data json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error codes of the control socket. The peer link's codes (docs/protocol.md) are
// used as they are where an op relays them.
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

// The protocol hello names. Version moves only when a change could break
// a client written for the one before (docs/control.md, "Versions"); what
// is added meanwhile is found in hello's ops and topics.
const (
	ProtocolName    = "octosup-control"
	ProtocolVersion = 1
)

// HelloData is hello's data: the protocol, its version, and the ops and
// topics this daemon serves, sorted.
type HelloData struct {
	Protocol string   `json:"protocol"`
	Version  int      `json:"version"`
	Ops      []string `json:"ops"`
	Topics   []string `json:"topics"`
	MaxLine  int      `json:"max_line"`
}

// Event topics a subscriber may ask for. TopicLog is not subscribed to
// directly: logs with follow delivers it.
const (
	TopicState    = "state"
	TopicApproval = "approval"
	TopicAppFrame = "app.frame"
	TopicLog      = "log"
)

// Args of the ops this package knows. Unknown members are refused.

// StatusArgs are status's args; App "" means every app. Usage asks for
// each running app's usage, read from its leaf's counters at the time:
// a few files an app, which a status of many apps otherwise does not
// read.
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
	// KeepRunning leaves each running app whose entry changed what its
	// process runs as it is, instead of restarting it: status marks it
	// stale (AppStatus.Stale) until it is restarted.
	KeepRunning bool `json:"keep_running,omitempty"`
}

// SubscribeArgs are subscribe's args; no topics means TopicState.
type SubscribeArgs struct {
	Topics []string `json:"topics,omitempty"`
}

// Data of the ops this package knows.

// StatusData is status's data: the apps, and the daemon's state store.
type StatusData struct {
	Apps  []AppStatus  `json:"apps"`
	Store *StoreStatus `json:"store,omitempty"`
}

// StoreStatus is the health of the daemon's state store (consent, rules,
// sessions, the audit trail): how the daemon found it at start and what
// it could not write since. Notes says all of it for a person, a line
// each; a healthy store has none.
type StoreStatus struct {
	// Path is the file the store runs on: the state file, or a
	// temporary one when Temporary says why.
	Path    string   `json:"path"`
	Healthy bool     `json:"healthy"`
	Notes   []string `json:"notes"`
	// Damage is what was wrong with the state file at start.
	Damage *StoreDamage `json:"damage,omitempty"`
	// Temporary is why this run keeps its state in a file of its own,
	// lost when the daemon stops.
	Temporary string `json:"temporary,omitempty"`
	// Restored is where the store's content came from at start when it
	// is not the state file's own.
	Restored *StoreRestored `json:"restored,omitempty"`
	// AuditDropped is how many audit entries could not be written since
	// start; AuditError is the last such write's error.
	AuditDropped int    `json:"audit_dropped,omitempty"`
	AuditError   string `json:"audit_error,omitempty"`
	// BackupError is why the last good copy could not be written.
	BackupError string `json:"backup_error,omitempty"`
}

// StoreDamage is a state file found damaged at start: moved aside to
// MovedTo and kept, or (MoveError) left in place.
type StoreDamage struct {
	At        time.Time `json:"at"`
	Problem   string    `json:"problem"`
	MovedTo   string    `json:"moved_to,omitempty"`
	MoveError string    `json:"move_error,omitempty"`
}

// StoreRestored is what the store started from: a copy of From (the good
// copy, written at At), or nothing (From empty: nothing is granted, and
// Problem says why no good copy was used).
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
	// Stale names what of the app's entry changed since its process
	// started (see AppChange.Changed), when a reload with keep_running
	// left it running: the process runs its old entry until it is
	// restarted. Absent otherwise.
	Stale []string `json:"stale,omitempty"`
	// Limits says which of the entry's limits hold its process (since it
	// last started); Usage is what its cgroup counts now, read for this
	// answer (docs/limits.md).
	Limits *LimitsReport `json:"limits,omitempty"`
	Usage  *Usage        `json:"usage,omitempty"`
}

// LimitsReport says which of an app's limits took: limiter "cgroup",
// "prlimit", "cgroup+prlimit" or "none"; applied as name=value; missing
// the controllers of asked-for limits nothing enforces ("limits.memory").
type LimitsReport struct {
	Limiter string   `json:"limiter"`
	Applied []string `json:"applied"`
	Missing []string `json:"missing"`
}

// Usage is what an app's cgroup counts. The memory figures are those of
// the memory controller where the daemon has it, else memory_rss, the
// resident sets of the app's processes added up.
type Usage struct {
	CPUUsec       uint64    `json:"cpu_usec"`
	MemoryCurrent uint64    `json:"memory_current,omitempty"`
	MemoryPeak    uint64    `json:"memory_peak,omitempty"`
	MemoryRSS     uint64    `json:"memory_rss,omitempty"`
	Tasks         int       `json:"tasks"`
	At            time.Time `json:"at"`
}

// Exit is how an app's last process ended. OOM is set when the kernel
// OOM-killed a process of the app, and says what for: "memory_max 512M".
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

// JailReport says which jail layers took for an app's process, and which
// desktop sockets and devices it was given.
type JailReport struct {
	LandlockABI int      `json:"landlock_abi"`
	Layers      []string `json:"layers"`
	Missing     []string `json:"missing"`
	Grants      []Grant  `json:"grants,omitempty"`
}

// Grant is one desktop socket or device of an app: name as in its entry
// (wayland, pulseaudio, pipewire, dri), path what it reaches, via how:
// "guard-connect" (the daemon makes the app's connect: the server sees the
// daemon, and a compositor gives the app no security context),
// "landlock" (a render node, read-write with its ioctls), or
// "no-render-node" (dri asked for on a machine without one).
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

// StateData is the data of start, stop and restart: the state the app
// reached, with the rest of its status.
type StateData struct {
	State string    `json:"state"`
	App   AppStatus `json:"app"`
}

// LogsData is logs's data, oldest line first. Truncated says that fewer
// lines than asked for were sent because they did not fit in one line.
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
	// ran into a limit ("tasks_max reached (512): …"), once per episode.
	Warning string `json:"warning,omitempty"`
}

// SubscribeData is subscribe's data: the topics now delivered.
type SubscribeData struct {
	Topics []string `json:"topics"`
}

// ReloadData is reload's data: the new manifest's number of apps, and
// what the reload did to them, each list in manifest order (empty, not
// absent, when nothing is in it).
type ReloadData struct {
	Apps int `json:"apps"`
	// Added and Removed are the apps the manifest added (started when
	// autostart) and removed (stopped).
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	// Restarted are the running apps whose process ran an entry that
	// changed, restarted to run the new one.
	Restarted []AppChange `json:"restarted"`
	// Stale are those apps when keep_running left them running their old
	// entry.
	Stale []AppChange `json:"stale"`
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
	// State, Pid and Reason are where the restart left the app (failed
	// with the reason when its new entry cannot start); for a stale app,
	// its state then.
	State  string `json:"state"`
	Pid    int    `json:"pid,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ManifestProblems is the Data of an invalid_manifest error.
type ManifestProblems struct {
	Problems []string `json:"problems"`
}

// ErrBadRequest is matched (errors.Is) by every error DecodeRequest
// returns. Their messages do not repeat it: the answer's code already says
// bad_request.
var ErrBadRequest = errors.New("bad request")

// requestError is a refused request line.
type requestError struct{ err error }

func (e *requestError) Error() string        { return e.err.Error() }
func (e *requestError) Unwrap() error        { return e.err }
func (e *requestError) Is(target error) bool { return target == ErrBadRequest }

func badRequest(format string, args ...any) error {
	return &requestError{err: fmt.Errorf(format, args...)}
}

// requestShape is what every refusal of a line's form ends with.
const requestShape = `a request is one JSON object {"id": N, "op": "...", "args": {...}} on a line, id a positive integer`

// maxDepth is how deep a request line's objects and arrays may nest, its
// own object counted (docs/control.md). jsontext's own limit is far
// deeper.
const maxDepth = 32

// requestLine is a request line as DecodeRequest reads it.
type requestLine struct {
	ID   int64          `json:"id"`
	Op   string         `json:"op"`
	Args jsontext.Value `json:"args"`
}

// DecodeRequest decodes one request line (without its newline) strictly:
// one JSON object with a positive integer id, a non-empty op, args an
// object when present, no other member, nothing after it; no name twice
// in any object, valid UTF-8, at most maxDepth levels deep. On error it
// still returns the request's id when the line is a well-formed object
// with a usable id and each of its members once (a name twice deeper in,
// a byte that is not UTF-8 or text after the object keeps it), so that
// the answer can be attributed; otherwise the ID is 0, which an answer
// carries as "id": null. The request's Args are a copy.
func DecodeRequest(line []byte) (Request, error) {
	var w requestLine
	err := jsonv2.Unmarshal(line, &w, strictOptions(line))
	k := w.Args.Kind()
	if err != nil || w.ID <= 0 || w.Op == "" || (k != '{' && k != 'n' && k != 0) || tooDeep(line) {
		return refuse(line, err)
	}
	req := Request{ID: w.ID, Op: w.Op}
	if k == '{' {
		req.Args = json.RawMessage(w.Args)
	}
	return req, nil
}

// rawRequest is a refused line's members as written.
type rawRequest struct {
	ID   jsontext.Value `json:"id"`
	Op   jsontext.Value `json:"op"`
	Args jsontext.Value `json:"args"`
}

// lenient reads a refused line for its members, past what the strict
// reading refuses in a well-formed object: a name twice, a byte that is
// not UTF-8.
var lenient = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// refuse words why DecodeRequest refuses line, one refusal in the order
// of its doc, and finds the id to answer with. strictErr is the strict
// reading's error, if any.
func refuse(line []byte, strictErr error) (Request, error) {
	var req Request
	if start := bytes.TrimLeft(line, jsonSpace); len(start) == 0 || start[0] != '{' {
		return req, badRequest("the line is not a JSON object: %s", requestShape)
	}
	var syn *jsontext.SyntacticError
	errors.As(strictErr, &syn)
	// A member twice leaves no id to answer with, whatever the strict
	// reading stopped at first: the lenient one below keeps the last.
	if name, twice := topDuplicate(line); twice {
		return req, badRequest("the request has %q twice: send each member once", name)
	}
	if strictjson.PastMaxDepth(strictErr) {
		// Deeper than jsontext reads at all: no member can be read.
		return req, badRequest("the line is not valid JSON (nested deeper than %d levels): %s", maxDepth, requestShape)
	}
	// Only the first value: what follows it is a refusal of its own.
	var w rawRequest
	dec := jsontext.NewDecoder(bytes.NewReader(line), lenient)
	if err := jsonv2.UnmarshalDecode(dec, &w); err != nil {
		return req, badRequest("the line is not valid JSON (%w): %s", syntaxCause(err), requestShape)
	}
	// The id first: every later refusal can then be attributed.
	id, idOK := parseID(w.ID)
	if idOK {
		req.ID = id
	}
	var sem *jsonv2.SemanticError
	if errors.As(strictErr, &sem) && errors.Is(sem.Err, jsonv2.ErrUnknownName) {
		name, near := sem.JSONPointer.LastToken(), ""
		if n := suggest.Nearest(name, []string{"id", "op", "args"}); n != "" {
			near = fmt.Sprintf(" (rename it to %q: names are exact)", n)
		}
		return req, badRequest("the request has no member %q%s: a request has only id, op and args", name, near)
	}
	if !idOK {
		got := "none"
		if len(w.ID) > 0 {
			got = string(w.ID)
			if len(got) > 40 {
				got = got[:40] + "…"
			}
		}
		return req, badRequest("id must be a positive integer (up to 2^63-1), got %s: this answer's id is null because the line has no id an answer could carry", got)
	}
	if len(bytes.TrimRight(line[dec.InputOffset():], jsonSpace)) > 0 {
		return req, badRequest("more than one JSON value on the line: send one request a line")
	}
	if jsonv2.Unmarshal(w.Op, &req.Op, lenient) != nil || req.Op == "" {
		return req, badRequest("op must be a non-empty string, the name of an op (the hello op lists them)")
	}
	switch k := w.Args.Kind(); k {
	case '{':
		req.Args = json.RawMessage(w.Args)
	case 'n', 0: // null or absent: no args
	default:
		return req, badRequest("args must be an object (or absent): {\"app\": \"notes\"}, not %s", kindWords(k, w.Args))
	}
	switch {
	case syn != nil && syn.Err == jsontext.ErrDuplicateName:
		return req, badRequest("%s is there twice: send each member once", strings.TrimPrefix(dotted(syn.JSONPointer), "."))
	case strictErr != nil:
		return req, badRequest("the line is not valid JSON (%w): %s", syntaxCause(strictErr), requestShape)
	}
	// What is left of DecodeRequest's checks is the nesting.
	return req, badRequest("the line is not valid JSON (nested deeper than %d levels): %s", maxDepth, requestShape)
}

// jsonSpace is the space JSON allows around a value.
const jsonSpace = " \t\r\n"

// topDuplicate is a name the line's object has twice, read leniently
// and only as far as it is well-formed.
func topDuplicate(line []byte) (string, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(line), lenient)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	seen := map[string]bool{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		name := tok.String()
		if seen[name] {
			return name, true
		}
		seen[name] = true
		if dec.SkipValue() != nil {
			return "", false
		}
	}
	return "", false
}

// syntaxCause is what jsontext found wrong, without its offset: the
// words a refusal quotes ("unexpected EOF").
func syntaxCause(err error) error {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return syn.Err
	}
	return err
}

// parseID is the id a request's raw id member holds, when it is a usable
// one.
func parseID(raw jsontext.Value) (int64, bool) {
	if raw.Kind() != '0' {
		return 0, false
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	return id, err == nil && id > 0
}

// tooDeep reports whether the JSON text v nests objects and arrays more
// than maxDepth levels deep.
func tooDeep(v []byte) bool {
	if bytes.Count(v, []byte("{"))+bytes.Count(v, []byte("[")) <= maxDepth {
		return false // the usual line: too few to nest that deep
	}
	dec := jsontext.NewDecoder(bytes.NewReader(v), lenient)
	for dec.StackDepth() <= maxDepth {
		if _, err := dec.ReadToken(); err != nil {
			return false
		}
	}
	return true
}

// EncodeEvent returns the line {"event": topic, ...body's members} for a
// body that marshals to a JSON object, or {"event": topic, "data": body}
// for anything else. The line has no trailing newline.
func EncodeEvent(topic string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", topic, err)
	}
	name, _ := json.Marshal(topic)
	var out bytes.Buffer
	out.Grow(len(b) + len(name) + 16)
	out.WriteString(`{"event":`)
	out.Write(name)
	switch {
	case len(b) > 0 && b[0] == '{':
		if rest := bytes.TrimSpace(b[1:]); len(rest) > 0 && rest[0] != '}' {
			out.WriteByte(',')
		}
		out.Write(b[1:])
	default:
		out.WriteString(`,"data":`)
		out.Write(b)
		out.WriteByte('}')
	}
	return out.Bytes(), nil
}

// Event is one event line a connection received: Name is its "event"
// member, Raw the whole line.
type Event struct {
	Name string
	Raw  json.RawMessage
}

// Decode unmarshals the event's line into v (the "event" member is
// ignored by struct targets that do not name it).
func (e Event) Decode(v any) error { return json.Unmarshal(e.Raw, v) }
