package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
)

// maxOpen bounds the calls in flight without an outcome: beyond it a
// worker waits, so that the hanging ones (which end only at their
// deadline) do not crowd out the rest.
const maxOpen = 600

// worker is one goroutine of the kernel: it makes calls of every kind
// until ctx ends, cancels some, probes the refusals and closes accounts.
func (c *chaos) worker(ctx context.Context, w int, rng *rand.Rand) {
	var recent []callSpec // accepted calls, for cancels and duplicate probes
	n := 0
	for ctx.Err() == nil {
		if open, _ := c.led.Open(); open > maxOpen {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		n++
		app := c.apps[rng.IntN(len(c.apps))]
		id := fmt.Sprintf("g%d-w%d-%d", c.gen, w, n)
		switch r := rng.Float64(); {
		case r < 0.84:
			s := randomCall(rng, app, id, c.cfg.MaxDeadline)
			ctxID, ok := c.pickContext(ctx, rng, app)
			if !ok {
				// The app is down or has not opened its sessions yet.
				// Now and then the call goes anyway and must be refused
				// (not_connected, unknown_context); mostly another app
				// gets it.
				if rng.IntN(10) != 0 {
					continue
				}
				ctxID, s.Refusal = "gone-"+id, "unknown_context"
			}
			if c.sendCall(ctx, s, ctxID) && s.Refusal == "" {
				recent = append(recent, s)
				if len(recent) > 64 {
					recent = recent[1:]
				}
			}
		case r < 0.92:
			if len(recent) > 0 {
				c.cancel(recent[rng.IntN(len(recent))])
			}
		case r < 0.985:
			c.probe(ctx, rng, app, id, recent)
		case r < 0.99:
			acct := accounts[rng.IntN(len(accounts))]
			if err := c.admin.do(ctx, opAccountClose, map[string]string{"app": app, "account": acct}, nil, nil); err == nil {
				c.led.Count("account.close", 1)
			}
		default:
			c.listContexts(ctx, app)
		}
	}
}

// randomCall draws a call: its risk, confirm, deadline and the app's
// behaviour.
func randomCall(rng *rand.Rand, app, id string, maxDeadline time.Duration) callSpec {
	s := callSpec{App: app, ID: id, Tool: tools[rng.IntN(len(tools))]}
	s.Risk = pick(rng, []string{"read", "write", "destructive", "", "bogus"}, []int{40, 38, 12, 5, 5})
	s.Confirm = pick(rng, []string{"none", "host", "app"}, []int{55, 25, 20})
	maxMS := max(maxDeadline.Milliseconds(), 10)
	switch r := rng.IntN(10); {
	case r < 2:
		s.TimeoutMS = 1 + rng.Int64N(50)
	case r < 7:
		s.TimeoutMS = 50 + rng.Int64N(min(1500, maxMS))
	default:
		s.TimeoutMS = min(maxMS, 1500) + rng.Int64N(max(maxMS-1500, 1))
	}
	s.TimeoutMS = min(s.TimeoutMS, maxMS)
	// Weights in thousandths; a crash takes the app's other calls along,
	// so it is rare.
	s.Do = pick(rng, []string{"ok", "error", "slow", "hang", "skip", "double", "crash"}, []int{470, 120, 160, 100, 60, 87, 3})
	s.MS = rng.Int64N(2*s.TimeoutMS + 1)
	s.Late = rng.IntN(2) == 0
	return s
}

func pick(rng *rand.Rand, what []string, weights []int) string {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w {
			return what[i]
		}
		n -= w
	}
	return what[len(what)-1]
}

// pickContext returns one of the app's open contexts, listing them when
// none is known.
func (c *chaos) pickContext(ctx context.Context, rng *rand.Rand, app string) (string, bool) {
	c.mu.Lock()
	ids := c.contexts[app]
	c.mu.Unlock()
	if len(ids) == 0 || rng.IntN(20) == 0 {
		ids, _ = c.listContexts(ctx, app)
	}
	if len(ids) == 0 {
		return "", false
	}
	return ids[rng.IntN(len(ids))], true
}

// probe sends a call the daemon must refuse: a tool the app was not
// granted, a deadline out of range, a made-up context, or the id of a
// call it accepted before.
func (c *chaos) probe(ctx context.Context, rng *rand.Rand, app, id string, recent []callSpec) {
	ctxID, ok := c.pickContext(ctx, rng, app)
	if !ok {
		ctxID = "none"
	}
	s := randomCall(rng, app, id, c.cfg.MaxDeadline)
	switch rng.IntN(4) {
	case 0:
		s.Tool, s.Refusal = "chaos.nope", "declined"
	case 1:
		s.TimeoutMS, s.Refusal = pick64(rng, []int64{0, -5, (11 * time.Minute).Milliseconds()}), "bad_request"
	case 2:
		ctxID, s.Refusal = "made-up-"+id, "unknown_context"
	default:
		if len(recent) == 0 {
			return
		}
		// The id of a call accepted before, into one of its app's open
		// contexts (the duplicate check comes before the context's): the
		// ledger knows the id, and a second accept is the violation.
		s = recent[rng.IntN(len(recent))]
		if ctxID, ok = c.pickContext(ctx, rng, s.App); !ok {
			return
		}
		c.led.Count("duplicate probes", 1)
	}
	c.led.Count("refusal probes", 1)
	c.sendCall(ctx, s, ctxID)
}

func pick64(rng *rand.Rand, v []int64) int64 { return v[rng.IntN(len(v))] }

// cancel withdraws an accepted call (it may have its outcome already:
// then the daemon answers unknown_call).
func (c *chaos) cancel(s callSpec) {
	c.withKernel(func(kc *conn) {
		rctx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		err := kc.do(rctx, opToolCancel, map[string]string{"app": s.App, "call_id": s.ID}, nil, func(resp control.Response) {
			what := "ok"
			if resp.Error != nil {
				what = resp.Error.Code
			}
			c.led.Note(s.App, s.ID, kc.id, "kernel's tool.cancel answered %s", what)
		})
		if err == nil {
			c.led.Count("tool.cancel ok", 1)
		}
	})
}

// driver is the chaos around the calls: it kills and restarts apps,
// detaches and re-attaches the kernel, and revokes standing rules.
func (c *chaos) driver(ctx context.Context, rng *rand.Rand) {
	var starts sync.WaitGroup
	defer starts.Wait()
	inflight := make(chan struct{}, 4) // lifecycle ops at once
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(20+rng.IntN(180)) * time.Millisecond):
		}
		switch r := rng.Float64(); {
		case r < 0.40:
			app := c.apps[rng.IntN(len(c.apps))]
			c.mu.Lock()
			pid := c.pids[app]
			c.mu.Unlock()
			if pid > 0 && c.procs.Kill(pid, unix.SIGKILL) == nil {
				c.led.Count("app SIGKILLs", 1)
			}
		case r < 0.75:
			op := control.OpStart
			app := c.stoppedApp(rng)
			if app == "" || rng.IntN(8) == 0 {
				op, app = control.OpRestart, c.apps[rng.IntN(len(c.apps))]
			}
			select {
			case inflight <- struct{}{}:
			default:
				continue
			}
			starts.Add(1)
			go func() {
				defer starts.Done()
				defer func() { <-inflight }()
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := c.admin.do(sctx, op, control.AppArgs{App: app}, nil, nil); err == nil {
					c.led.Count("app "+op+"s", 1)
				} else {
					c.led.Count("app "+op+" refused", 1)
				}
			}()
		case r < 0.88:
			pause := time.Duration(rng.IntN(300)) * time.Millisecond
			if err := c.reattach(ctx, pause, nil); err != nil {
				c.notef("re-attach the kernel: %v", err)
			}
		default:
			select {
			case c.approvals <- approverJob{revoke: true, pick: rng.Uint64()}:
			default:
			}
		}
	}
}

func (c *chaos) stoppedApp(rng *rand.Rand) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stopped []string
	for _, app := range c.apps {
		if st := c.states[app]; st == "stopped" || st == "failed" {
			stopped = append(stopped, app)
		}
	}
	if len(stopped) == 0 {
		return ""
	}
	return stopped[rng.IntN(len(stopped))]
}

// approverJob is one thing for the approver: a pending approval to
// decide on, a decided answer to send, or a revoke.
type approverJob struct {
	approval *control.Approval
	answer   *control.ApproveArgs
	tool     string // the answer's app/tool
	revoke   bool
	pick     uint64
}

// startApprover runs the person: it allows every consent prompt, and
// answers a tool sheet allow or deny (some with remember) after a
// moment, or ignores it. Approves and revokes go out one at a time, so
// the standing rules it expects are those of the answers in order.
func (c *chaos) startApprover(ctx context.Context, rng *rand.Rand) <-chan struct{} {
	done := make(chan struct{})
	var timers sync.WaitGroup
	go func() {
		defer close(done)
		defer timers.Wait()
		for {
			var job approverJob
			select {
			case <-ctx.Done():
				return
			case job = <-c.approvals:
			}
			switch {
			case job.approval != nil && job.approval.Kind == "consent":
				c.approve(ctx, control.ApproveArgs{ApprovalID: job.approval.ApprovalID, Decision: "allow"}, "")
			case job.approval != nil:
				a := job.approval
				if rng.IntN(10) < 3 {
					c.led.Count("approvals ignored", 1)
					c.led.Note(a.App, a.CallID, 0, "host sheet %s: ignored by the person", a.ApprovalID)
					continue
				}
				ans := &control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow", Remember: rng.IntN(5) == 0}
				if rng.IntN(3) == 0 {
					ans.Decision = "deny"
				}
				c.led.Note(a.App, a.CallID, 0, "host sheet %s raised; the person will answer %s remember=%v", a.ApprovalID, ans.Decision, ans.Remember)
				delay := time.Duration(rng.IntN(250)) * time.Millisecond
				timers.Add(1)
				time.AfterFunc(delay, func() {
					defer timers.Done()
					select {
					case c.approvals <- approverJob{answer: ans, tool: a.App + "/" + a.Tool, pick: uint64(len(a.CallID))}:
					case <-ctx.Done():
					}
				})
			case job.answer != nil:
				c.approve(ctx, *job.answer, job.tool)
			case job.revoke:
				c.revokeOne(ctx, job.pick)
			}
		}
	}()
	return done
}

// approve answers an approval. Its request is not cut short when the
// approver stops: an answer the daemon took must be counted.
func (c *chaos) approve(_ context.Context, args control.ApproveArgs, tool string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.admin.do(ctx, control.OpApprove, args, nil, nil)
	if err != nil {
		var cerr *control.Error
		if errors.As(err, &cerr) {
			c.led.Count("approve refused "+cerr.Code, 1)
		}
		return
	}
	what := "approve " + args.Decision
	if args.Remember {
		what += " --remember"
		c.rulesMu.Lock()
		c.rules[tool] = args.Decision
		c.rulesMu.Unlock()
	}
	c.led.Count(what, 1)
}

// revokeOne revokes one of the standing rules it expects.
func (c *chaos) revokeOne(_ context.Context, pick uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.rulesMu.Lock()
	keys := make([]string, 0, len(c.rules))
	for k := range c.rules {
		keys = append(keys, k)
	}
	c.rulesMu.Unlock()
	if len(keys) == 0 {
		return
	}
	sort.Strings(keys)
	k := keys[pick%uint64(len(keys))]
	var app, tool string
	for i := range k {
		if k[i] == '/' {
			app, tool = k[:i], k[i+1:]
			break
		}
	}
	if err := c.admin.do(ctx, opRules, map[string]string{"action": "revoke", "app": app, "tool": tool}, nil, nil); err != nil {
		c.notef("rules revoke %s: %v", k, err)
		return
	}
	c.rulesMu.Lock()
	delete(c.rules, k)
	c.rulesMu.Unlock()
	c.led.Count("rules revoked", 1)
}
