package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// step is one thing the ledger is told, in wire order.
type step struct {
	op      string // sent, accept, refuse, lost, ack, finish, close
	id      string
	outcome string // finish: ok, error, outcome_unknown
	data    string // finish: the data member
	risk    string // sent
	refusal string // sent: the refusal a probe expects
	conn    int
}

func (s step) apply(l *ledger) {
	conn := s.conn
	if conn == 0 {
		conn = 1
	}
	switch s.op {
	case "sent":
		risk := s.risk
		if risk == "" {
			risk = "write"
		}
		l.Sent(callSpec{App: "a", ID: s.id, Tool: "t", Risk: risk, Confirm: "none", TimeoutMS: 1, Refusal: s.refusal}, conn)
	case "accept":
		l.Answered("a", s.id, conn, true, "", "")
	case "refuse":
		l.Answered("a", s.id, conn, false, "declined", "no")
	case "lost":
		l.Lost("a", s.id, conn, "connection ended")
	case "ack":
		l.Event(eventAck, []byte(fmt.Sprintf(`{"event":"tool.acknowledged","app":"a","call_id":%q}`, s.id)), conn)
	case "finish":
		line := fmt.Sprintf(`{"event":"tool.finished","app":"a","call_id":%q,"outcome":%q`, s.id, s.outcome)
		switch {
		case s.data != "":
			line += `,"data":` + s.data
		case s.outcome == "ok":
			line += fmt.Sprintf(`,"data":{"call_id":%q}`, s.id)
		default:
			line += `,"error":{"code":"timeout","message":"late"}`
		}
		l.Event(eventFinished, []byte(line+"}"), conn)
	case "close":
		l.Close()
	default:
		panic("unknown step " + s.op)
	}
}

func TestLedgerInvariants(t *testing.T) {
	ok := func(id string) []step {
		return []step{{op: "sent", id: id}, {op: "accept", id: id}, {op: "ack", id: id}, {op: "finish", id: id, outcome: "ok"}}
	}
	tests := []struct {
		name  string
		steps []step
		want  []string // substrings of the violations, in key order
	}{
		{name: "one call, ack then ok", steps: append(ok("c1"), step{op: "close"})},
		{name: "outcome on a later connection (queued while detached)", steps: []step{
			{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1", conn: 2}, {op: "finish", id: "c1", outcome: "outcome_unknown", conn: 2}, {op: "close"}}},
		{name: "no outcome", steps: []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1"}, {op: "close"}},
			want: []string{"no outcome"}},
		{name: "two outcomes", steps: append(ok("c1"), step{op: "finish", id: "c1", outcome: "error"}),
			want: []string{"a second outcome"}},
		{name: "two acks", steps: []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1"}, {op: "ack", id: "c1"}, {op: "finish", id: "c1", outcome: "ok"}},
			want: []string{"acknowledged twice"}},
		{name: "ack after outcome", steps: append(ok("c1"), step{op: "ack", id: "c1"}),
			want: []string{"acknowledged twice", "acknowledged after its outcome"}},
		{name: "outcome without ack", steps: []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "finish", id: "c1", outcome: "ok"}},
			want: []string{"without the acknowledgement"}},
		{name: "outcome for a refused call", steps: []step{{op: "sent", id: "c1"}, {op: "refuse", id: "c1"}, {op: "ack", id: "c1"}, {op: "finish", id: "c1", outcome: "error"}, {op: "close"}},
			want: []string{"refused", "refused"}},
		{name: "event for a call never sent", steps: []step{{op: "ack", id: "zz"}},
			want: []string{"never sent"}},
		{name: "event before the accepted answer", steps: []step{{op: "sent", id: "c1"}, {op: "ack", id: "c1"}, {op: "accept", id: "c1"}, {op: "finish", id: "c1", outcome: "ok"}},
			want: []string{"before the call's accepted answer"}},
		{name: "answer lost with its connection, outcome later: allowed", steps: []step{
			{op: "sent", id: "c1"}, {op: "lost", id: "c1"}, {op: "ack", id: "c1", conn: 2}, {op: "finish", id: "c1", outcome: "ok", conn: 2}, {op: "close"}}},
		{name: "answer lost, no outcome: allowed", steps: []step{{op: "sent", id: "c1"}, {op: "lost", id: "c1"}, {op: "close"}}},
		{name: "accepted twice", steps: append(ok("c1"), step{op: "sent", id: "c1"}, step{op: "accept", id: "c1"}),
			want: []string{"accepted twice"}},
		{name: "duplicate refused", steps: append(ok("c1"), step{op: "sent", id: "c1"}, step{op: "refuse", id: "c1"}, step{op: "close"})},
		{name: "probe accepted", steps: []step{{op: "sent", id: "c1", refusal: "declined"}, {op: "accept", id: "c1"}},
			want: []string{"must refuse (declined)"}},
		{name: "read ends outcome_unknown", steps: []step{{op: "sent", id: "c1", risk: "read"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1"}, {op: "finish", id: "c1", outcome: "outcome_unknown"}},
			want: []string{"read call ended outcome_unknown"}},
		{name: "ok with another call's data", steps: []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1"}, {op: "finish", id: "c1", outcome: "ok", data: `{"call_id":"c2"}`}},
			want: []string{"not this call's"}},
		{name: "unknown outcome", steps: []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "ack", id: "c1"}, {op: "finish", id: "c1", outcome: "maybe"}},
			want: []string{`"maybe" is none of`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger(time.Now())
			for _, s := range tt.steps {
				s.apply(l)
			}
			got := l.Violations()
			if len(got) != len(tt.want) {
				t.Fatalf("violations = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].Rule, w) {
					t.Errorf("violation %d = %q, want it to say %q", i, got[i].Rule, w)
				}
			}
			for _, v := range got {
				if v.Key != "" && len(l.History(v.Key)) == 0 {
					t.Errorf("violation of %s without the call's history", v.Key)
				}
			}
		})
	}
}

func TestLedgerOpenAndHistory(t *testing.T) {
	l := newLedger(time.Now())
	for _, s := range []step{{op: "sent", id: "c1"}, {op: "accept", id: "c1"}, {op: "sent", id: "c2"}, {op: "refuse", id: "c2"}} {
		s.apply(l)
	}
	if n, _ := l.Open(); n != 1 {
		t.Fatalf("Open = %d, want 1 (c1 accepted without an outcome; c2 refused)", n)
	}
	step{op: "ack", id: "c1"}.apply(l)
	step{op: "finish", id: "c1", outcome: "ok"}.apply(l)
	if n, _ := l.Open(); n != 0 {
		t.Fatalf("Open = %d after c1's outcome", n)
	}
	h := l.History(callKey("a", "c1"))
	if len(h) != 4 || !strings.Contains(h[0], "sent tool.call") || !strings.Contains(h[3], "tool.finished") {
		t.Fatalf("history of c1 = %q", h)
	}
}

func TestWithinBudget(t *testing.T) {
	base := debugData{FDs: 100, Goroutines: 300, RSSBytes: 20 << 20}
	tests := []struct {
		name string
		now  debugData
		want string // "" within budget, else a word of the excess
	}{
		{name: "same", now: base},
		{name: "slack", now: debugData{FDs: 100 + fdSlack, Goroutines: 300 + goroutineSlack, RSSBytes: 20<<20 + rssSlackBytes}},
		{name: "fd leak", now: debugData{FDs: 100 + fdSlack + 1, Goroutines: 300, RSSBytes: 20 << 20}, want: "fds"},
		{name: "goroutine leak", now: debugData{FDs: 100, Goroutines: 400, RSSBytes: 20 << 20}, want: "goroutines"},
		{name: "rss", now: debugData{FDs: 100, Goroutines: 300, RSSBytes: 200 << 20}, want: "rss"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withinBudget(base, tt.now, 0, 1)
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("withinBudget = %q, want %q", got, tt.want)
			}
		})
	}
	// What the daemon keeps per accepted call is allowed up to each app's
	// window of finished ids, no further.
	if rssLimit(base, 10, 1) <= rssLimit(base, 0, 1) || rssLimit(base, 1e6, 1) != rssLimit(base, windowPerApp, 1) {
		t.Fatal("rssLimit does not grow with accepted calls up to the window")
	}
}
