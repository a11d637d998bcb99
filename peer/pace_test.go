package peer

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"octosup/peer/internal/frame"
	"octosup/policy"
)

// TestUnaskedLinesArePaced: an app that floods its hub with lines the
// daemon did not ask for (pass-through frames, results of calls it was
// never sent) is read no faster than UnaskedRate once its burst is
// spent, so its socket slows it; every line is still handled.
func TestUnaskedLinesArePaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		seen func(h *harness) // waits for the line's effect
	}{
		{"pass-through frames", `{"ui":{"progress":1}}`, func(h *harness) {
			select {
			case <-h.events.frames:
			case <-time.After(wait):
				t.Fatal("a pass-through frame did not arrive")
			}
		}},
		{"results of calls never sent", `{"octos_peer":{"type":"tool_result","call_id":"x","ok":true}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost := len(tc.line) + 1 + unaskedLineCost
			const perSecond = 100
			h := newHarness(t, func(c *Config) { c.UnaskedRate = perSecond * cost })
			a := h.attach(notesApp("notes"))
			// The limiter starts full: its burst takes the longest line.
			burst := (frame.MaxFrame + 1 + unaskedLineCost) / cost
			extra := perSecond / 2
			n := burst + extra
			start := time.Now()
			go a.conn.Write([]byte(strings.Repeat(tc.line+"\n", n)))
			for range n {
				if tc.seen != nil {
					tc.seen(h)
				}
			}
			if tc.seen == nil {
				until(t, "every result handled", func() bool {
					return h.logs.FilterMessage("tool_result ignored: a call this app was never sent").Len() == n
				})
			}
			// A line is paced after it is handled, and the burst may
			// leave up to a line's worth: the last of the extra lines
			// waits out extra-2 lines' time at least.
			if d, least := time.Since(start), time.Duration(extra-2)*time.Second/perSecond; d < least {
				t.Fatalf("%d lines past the burst of %d were handled in %s; paced at %d a second they take %s at least", extra, burst, d, perSecond, least)
			}
		})
	}
}

// TestAskedLinesAreNotPaced: results of the calls an app was sent cost
// it nothing, however many: with a budget that lets one burst of unasked
// lines through and then a byte a second, 600 calls answered with 4 KB
// each (2.4 MB) still finish.
func TestAskedLinesAreNotPaced(t *testing.T) {
	h, r := newToolHarness(t, func(c *Config) { c.UnaskedRate = 1 })
	a, ctx := h.toolApp(toolEntry("notes"))
	const rounds, per = 3, 200
	for round := range rounds {
		var ids []string
		for i := range per {
			id := fmt.Sprintf("c%d-%d", round, i)
			ids = append(ids, id)
			h.call("notes", kc(ctx, id, "notes.search", RiskRead, ConfirmNone))
		}
		var answers bytes.Buffer
		for _, id := range ids {
			a.nextToolCall(id)
			fmt.Fprintf(&answers, `{"octos_peer":{"type":"tool_result","call_id":%q,"ok":true,"data":{"pad":%q}}}`+"\n", id, strings.Repeat("p", 4000))
		}
		go a.conn.Write(answers.Bytes())
		want := 2 * per * (round + 1) // an ack and a finish a call
		if got := r.WaitFor(want, wait); len(got) < want {
			t.Fatalf("round %d: the relay saw %d callbacks, want %d: the app's results were paced", round, len(got), want)
		}
	}
}

// TestStoreRequestsArePaced: a request the daemon keeps open while its
// store answers (session.history) is answered in microseconds, so it is
// paced as an unasked line is: an app asking for history in a loop is
// read no faster than UnaskedRate once its burst is spent.
func TestStoreRequestsArePaced(t *testing.T) {
	const rate = 400 * (1 << 10) // bytes a second: some 40 lines
	h := newHarness(t, func(c *Config) { c.UnaskedRate = rate })
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	line := func(i int) string {
		return fmt.Sprintf(`{"octos_peer":{"type":"request","req_id":"h%05d","method":%q,"args":{"context_id":%q}}}`+"\n", i, policy.MethodSessionHistory, ctx)
	}
	cost := len(line(0)) + storeJobCost + unaskedLineCost
	burst := (frame.MaxFrame + 1 + unaskedLineCost) / cost
	extra := 20
	n := burst + extra
	var lines strings.Builder
	for i := range n {
		lines.WriteString(line(i))
	}
	start := time.Now()
	go a.conn.Write([]byte(lines.String()))
	for i := range n {
		a.okReply(fmt.Sprintf("h%05d", i))
	}
	// As in TestUnaskedLinesArePaced: the last of the extra lines waits
	// out extra-2 lines' time at least.
	if d, least := time.Since(start), time.Duration((extra-2)*cost)*time.Second/rate; d < least {
		t.Fatalf("%d history requests past the burst of %d were answered in %s; paced they take %s at least", extra, burst, d, least)
	}
}
