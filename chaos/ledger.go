package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// callSpec is what the kernel asked of a call.
type callSpec struct {
	App, ID   string
	Tool      string
	Risk      string
	Confirm   string
	TimeoutMS int64
	Do        string // the app's behaviour (chaos/app)
	MS        int64  // how long a "slow" call takes
	Late      bool   // answer even after tool_cancel
	// Refusal is the refusal a probe expects ("declined", "bad_request",
	// "unknown_context"); "" for a call meant to run. (A duplicate probe
	// resends an accepted call's id: accepting it twice is the violation.)
	Refusal string
}

// entry is one line of a call's history.
type entry struct {
	At   time.Time
	Conn int // the control connection it came on or went out on
	What string
}

// callRec is the ledger's record of one call id of one app.
type callRec struct {
	spec     callSpec
	sends    int
	accepts  int
	refusals int
	lost     int // tool.call answers lost with their connection
	closed   bool
	acks     int
	finishes int
	outcome  string
	accepted time.Time
	conn     int // the connection that took the accepted answer
	history  []entry
}

func (r *callRec) deadline() time.Time {
	return r.accepted.Add(time.Duration(r.spec.TimeoutMS) * time.Millisecond)
}

// violation is a broken invariant of one call (or of the run: Key "").
type violation struct {
	Key  string
	Rule string
}

// ledger records every call the kernel sent, every answer and every tool
// event, in the order the kernel's connection read them, and checks the
// invariants as they come.
type ledger struct {
	t0 time.Time

	mu         sync.Mutex
	calls      map[string]*callRec
	violations []violation
	counts     map[string]int
	// conns is what happened to each kernel connection (attached, hung
	// up, closed): a call's history shows its connections' lines too.
	conns map[int][]entry
}

func newLedger(t0 time.Time) *ledger {
	return &ledger{t0: t0, calls: map[string]*callRec{}, counts: map[string]int{}, conns: map[int][]entry{}}
}

func callKey(app, id string) string { return app + "/" + id }

func (l *ledger) violate(key, format string, args ...any) {
	l.violations = append(l.violations, violation{Key: key, Rule: fmt.Sprintf(format, args...)})
}

// Violatef records a violation of the run that is not a call's.
func (l *ledger) Violatef(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violate("", format, args...)
}

func (l *ledger) add(r *callRec, connID int, format string, args ...any) {
	r.history = append(r.history, entry{At: time.Now(), Conn: connID, What: fmt.Sprintf(format, args...)})
}

// Sent records a tool.call about to be written on connection connID.
func (l *ledger) Sent(s callSpec, connID int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := callKey(s.App, s.ID)
	r := l.calls[k]
	if r == nil {
		r = &callRec{spec: s}
		l.calls[k] = r
	}
	r.sends++
	l.counts["sent"]++
	what := "sent"
	if r.sends > 1 {
		what = "sent again (a duplicate probe)"
	}
	l.add(r, connID, "%s tool.call %s risk=%q confirm=%q timeout_ms=%d do=%q expect=%q",
		what, s.Tool, s.Risk, s.Confirm, s.TimeoutMS, s.Do, orDash(s.Refusal))
}

func orDash(s string) string {
	if s == "" {
		return "accepted"
	}
	return s
}

// Answered records the answer to a tool.call: accepted, or the code it
// was refused with.
func (l *ledger) Answered(app, id string, connID int, accepted bool, code, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := callKey(app, id)
	r := l.calls[k]
	if r == nil {
		l.violate(k, "an answer for a tool.call the kernel never sent")
		return
	}
	if !accepted {
		r.refusals++
		l.counts["refused "+code]++
		l.add(r, connID, "refused %s: %s", code, message)
		if r.spec.Refusal != "" && r.spec.Refusal != code && r.accepts == 0 {
			// Checks run in a fixed order (docs/protocol.md): only a
			// different refusal than the one probed is worth a note,
			// not a violation (an app may be down, say).
			l.counts["probe refused otherwise"]++
		}
		return
	}
	r.accepts++
	l.counts["accepted"]++
	l.add(r, connID, "accepted")
	if r.accepts == 1 {
		r.accepted, r.conn = time.Now(), connID
	}
	if r.accepts > 1 {
		l.violate(k, "a call_id was accepted twice (the repeat should be refused duplicate)")
	}
	if r.spec.Refusal != "" && r.spec.Refusal != "duplicate" {
		l.violate(k, "a call the daemon must refuse (%s) was accepted", r.spec.Refusal)
	}
}

// Lost records a tool.call whose answer went with its connection: it may
// or may not have been accepted.
func (l *ledger) Lost(app, id string, connID int, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.calls[callKey(app, id)]; r != nil {
		r.lost++
		l.counts["answer lost"]++
		l.add(r, connID, "answer lost: %s", why)
	}
}

// toolEvent is the body of tool.acknowledged and tool.finished.
type toolEvent struct {
	App     string          `json:"app"`
	CallID  string          `json:"call_id"`
	Outcome string          `json:"outcome"`
	Data    json.RawMessage `json:"data"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Event records a tool.acknowledged or tool.finished line read on
// connection connID.
func (l *ledger) Event(name string, line []byte, connID int) {
	var ev toolEvent
	err := json.Unmarshal(line, &ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.violate("", "a %s event that does not decode: %v: %s", name, err, line)
		return
	}
	k := callKey(ev.App, ev.CallID)
	r := l.calls[k]
	if r == nil {
		r = &callRec{spec: callSpec{App: ev.App, ID: ev.CallID}}
		l.calls[k] = r
		l.add(r, connID, "%s", strings.TrimSpace(string(line)))
		l.violate(k, "%s for a call the kernel never sent", name)
		return
	}
	l.add(r, connID, "%s", strings.TrimSpace(string(line)))
	if r.accepts == 0 {
		switch {
		case r.lost > 0:
			// Accepted after all: its answer went with the connection.
		case r.refusals > 0:
			l.violate(k, "%s for a call that was refused", name)
		default:
			l.violate(k, "%s before the call's accepted answer", name)
		}
	}
	switch name {
	case eventAck:
		r.acks++
		l.counts["acknowledged"]++
		if r.acks == 2 {
			l.violate(k, "acknowledged twice")
		}
		if r.finishes > 0 {
			l.violate(k, "acknowledged after its outcome")
		}
	case eventFinished:
		r.finishes++
		l.counts["finished"]++
		l.counts["outcome "+ev.Outcome]++
		if ev.Error != nil {
			l.counts["outcome "+ev.Outcome+" "+ev.Error.Code]++
		}
		if r.finishes == 1 {
			r.outcome = ev.Outcome
			if r.accepts > 0 && connID != r.conn {
				l.counts["outcomes on a later kernel connection"]++
			}
		}
		if r.finishes == 2 {
			l.violate(k, "a second outcome")
		}
		if r.acks == 0 {
			l.violate(k, "an outcome without the acknowledgement owed before it")
		}
		switch ev.Outcome {
		case "ok":
			var d struct {
				CallID string `json:"call_id"`
			}
			if json.Unmarshal(ev.Data, &d) != nil || d.CallID != ev.CallID {
				l.violate(k, "an ok outcome whose data is not this call's: %s", ev.Data)
			}
		case "error":
			if ev.Error == nil || ev.Error.Code == "" {
				l.violate(k, "an error outcome without an error code")
			}
		case "outcome_unknown":
			if r.spec.Risk == "read" {
				l.violate(k, "a read call ended outcome_unknown (a read is treated as having no effect)")
			}
		default:
			l.violate(k, "outcome %q is none of ok, error, outcome_unknown", ev.Outcome)
		}
	}
}

// Open is how many accepted calls have no outcome yet, and the latest
// deadline among them.
func (l *ledger) Open() (n int, latest time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.calls {
		if r.accepts > 0 && r.finishes == 0 {
			n++
			if d := r.deadline(); d.After(latest) {
				latest = d
			}
		}
	}
	return n, latest
}

// ConnNote records what happened to a kernel connection.
func (l *ledger) ConnNote(connID int, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[connID] = append(l.conns[connID], entry{At: time.Now(), Conn: connID, What: "(kernel connection) " + fmt.Sprintf(format, args...)})
}

// Note adds a line to a call's history (a cancel the kernel sent, ...).
func (l *ledger) Note(app, id string, connID int, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.calls[callKey(app, id)]; r != nil {
		l.add(r, connID, format, args...)
	}
}

// Count adds to a named counter of the report.
func (l *ledger) Count(name string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[name] += n
}

// Close checks what can only be checked once every outcome had its
// chance: every accepted call has exactly one.
func (l *ledger) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for k, r := range l.calls {
		if r.accepts > 0 && r.finishes == 0 && !r.closed {
			r.closed = true
			l.violate(k, "accepted, and no outcome %v after its deadline", now.Sub(r.deadline()).Round(time.Millisecond))
		}
	}
}

// Violations are the run's violations so far, calls in key order.
func (l *ledger) Violations() []violation {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]violation(nil), l.violations...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// History is a call's whole history, one timestamped line each (time
// since the run began).
func (l *ledger) History(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.calls[key]
	if r == nil {
		return nil
	}
	all := append([]entry(nil), r.history...)
	seen := map[int]bool{}
	for _, e := range r.history {
		if !seen[e.Conn] {
			seen[e.Conn] = true
			all = append(all, l.conns[e.Conn]...)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
	out := make([]string, 0, len(all))
	for _, e := range all {
		who := fmt.Sprintf("conn#%d", e.Conn)
		if e.Conn == 0 {
			who = "person"
		}
		out = append(out, fmt.Sprintf("%10.3fs %-7s %s", e.At.Sub(l.t0).Seconds(), who, e.What))
	}
	return out
}

// Counts is a copy of the counters.
func (l *ledger) Counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.counts))
	for k, v := range l.counts {
		out[k] = v
	}
	return out
}

const (
	eventAck      = "tool.acknowledged"
	eventFinished = "tool.finished"
)
