package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"octosup/control"
	"octosup/internal/rig"
	"octosup/policy"
)

// config is one chaos run.
type config struct {
	Octosupd string // the daemon binary (octosup-jail next to it)
	App      string // the chaos app binary
	Dir      string // scratch directory, removed unless Keep or a violation
	Keep     bool

	Duration    time.Duration // the storm
	Apps        int
	Workers     int // kernel goroutines issuing calls
	Seed        uint64
	MaxDeadline time.Duration // the longest timeout_ms a call gets

	Out      io.Writer // the report
	Progress io.Writer // what is going on, as it goes
}

// The ops and events of the tool calls (daemon/tool_ops.go) and the
// debug op (daemon/debug_ops.go), by name: chaos talks to the daemon
// over the wire only.
const (
	opToolCall     = "tool.call"
	opToolCancel   = "tool.cancel"
	opContextList  = "context.list"
	opAccountClose = "account.close"
	opRules        = "rules"
	opDebug        = "debug"
)

var (
	accounts = []string{"personal", "work"}
	tools    = []string{"chaos.a", "chaos.b", "chaos.c"}
)

// chaos is the state of one run.
type chaos struct {
	cfg   config
	t0    time.Time
	led   *ledger
	procs *procs
	tree  *rig.Tree
	apps  []string

	d     *rig.Daemon
	gen   int // the daemon's generation: 1, then 2 after the SIGKILL
	admin *conn
	watch *conn

	connSeq atomic.Int64

	// The kernel's connection: calls hold rw for reading; a detach holds
	// it for writing, so no tool.call is in flight when the kernel goes.
	krw     sync.RWMutex
	kconn   *conn
	hungUp  sync.Map // *conn → true when we ended it
	dropped atomic.Int64

	mu       sync.Mutex
	states   map[string]string
	pids     map[string]int
	contexts map[string][]string

	consentAsked [3]atomic.Int64 // by generation

	// Standing rules: what approve --remember and revoke answered ok.
	rulesMu sync.Mutex
	rules   map[string]string // app/tool → decision

	approvals chan approverJob
	notes     []string
	notesMu   sync.Mutex
}

func (c *chaos) progressf(format string, args ...any) {
	if c.cfg.Progress != nil {
		fmt.Fprintf(c.cfg.Progress, "chaos %7.1fs: "+format+"\n", append([]any{time.Since(c.t0).Seconds()}, args...)...)
	}
}

// notef keeps something the report must say that is not an invariant.
func (c *chaos) notef(format string, args ...any) {
	c.notesMu.Lock()
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
	c.notesMu.Unlock()
	c.progressf("note: "+format, args...)
}

func manifestApps(n int, bin string) []policy.App {
	no := false
	out := make([]policy.App, 0, n)
	for i := range n {
		restart := policy.RestartOnRequest
		if i%2 == 1 {
			restart = policy.RestartOnFailure
		}
		out = append(out, policy.App{
			ID:        fmt.Sprintf("chaos-%03d", i),
			Exec:      append([]string{bin}, accounts...),
			Autostart: true,
			Restart:   restart,
			Grants: policy.Grants{
				Services: []string{policy.ServiceAgent},
				Methods:  []string{policy.MethodSessionOpen, policy.MethodContextClose},
				Tools:    tools,
			},
			Sandbox: policy.Sandbox{
				Policy:    policy.PolicyJail,
				Network:   policy.NetworkNone,
				Processes: &no,
				Accounts:  accounts,
			},
		})
	}
	return out
}

// result is what a run found.
type result struct {
	Violations []violation
	Report     string
}

// run is the whole chaos run. An error is a run that could not be made
// (no daemon, ...); the invariants it broke are in result.Violations.
func run(ctx context.Context, cfg config) (result, error) {
	c := &chaos{
		cfg:       cfg,
		t0:        time.Now(),
		procs:     newProcs(),
		states:    map[string]string{},
		pids:      map[string]int{},
		contexts:  map[string][]string{},
		rules:     map[string]string{},
		approvals: make(chan approverJob, 1<<16),
	}
	c.led = newLedger(c.t0)
	apps := manifestApps(cfg.Apps, cfg.App)
	for _, a := range apps {
		c.apps = append(c.apps, a.ID)
	}
	t, err := rig.NewTree(cfg.Dir, apps)
	if err != nil {
		return result{}, fmt.Errorf("the daemon's tree in %s: %w", cfg.Dir, err)
	}
	c.tree = t
	rep := &report{}
	rep.linef("seed %d: %d apps (jailed: network none, processes false), %d kernel workers, storm %v, deadlines up to %v", cfg.Seed, cfg.Apps, cfg.Workers, cfg.Duration, cfg.MaxDeadline)
	err = c.phases(ctx, rep)
	c.shutdown()
	rep.counts(c.led.Counts())
	c.notesMu.Lock()
	for _, n := range c.notes {
		rep.linef("note: %s", n)
	}
	c.notesMu.Unlock()
	res := result{Violations: c.led.Violations()}
	rep.violations(c.led, res.Violations)
	res.Report = rep.String()
	return res, err
}

func (c *chaos) shutdown() {
	c.krw.Lock()
	if c.kconn != nil {
		c.hungUp.Store(c.kconn, true)
		c.kconn.close()
	}
	c.krw.Unlock()
	for _, cn := range []*conn{c.admin, c.watch} {
		if cn != nil {
			c.hungUp.Store(cn, true)
			cn.close()
		}
	}
	if c.d != nil {
		select {
		case <-c.d.Exited():
		default:
			c.d.Kill()
		}
		c.procs.Release(c.d.Pid())
	}
}

func isCode(err error, code string) bool {
	var cerr *control.Error
	return errors.As(err, &cerr) && cerr.Code == code
}

func describeDebug(d debugData) string {
	return fmt.Sprintf("fds %d, goroutines %d, threads %d, rss %s, heap %s", d.FDs, d.Goroutines, d.Threads, mib(d.RSSBytes), mib(int64(d.HeapBytes)))
}

func (c *chaos) closeConns() {
	c.krw.Lock()
	if c.kconn != nil {
		c.kconn.close()
	}
	c.kconn = nil
	c.krw.Unlock()
	c.admin.close()
	c.watch.close()
	c.admin, c.watch = nil, nil
}

// startGeneration starts a daemon on the tree and connects the admin, the
// watcher (state and approval events) and the kernel.
func (c *chaos) startGeneration(ctx context.Context, gen int) error {
	c.gen = gen
	c.progressf("starting octosupd (generation %d) with %d apps", gen, len(c.apps))
	d, err := rig.Start(ctx, c.cfg.Octosupd, c.tree, rig.Options{Name: fmt.Sprint(gen), Timeout: 2 * time.Minute})
	if err != nil {
		return fmt.Errorf("octosupd generation %d: %w", gen, err)
	}
	c.d = d
	c.mu.Lock()
	c.states, c.pids, c.contexts = map[string]string{}, map[string]int{}, map[string][]string{}
	c.mu.Unlock()
	if c.admin, err = dialConn(ctx, c.tree.Socket, c.nextConn(), nil); err != nil {
		return err
	}
	if c.watch, err = dialConn(ctx, c.tree.Socket, c.nextConn(), c.onWatchEvent); err != nil {
		return err
	}
	go c.watchDrop(c.watch, "watcher")
	if err := c.watch.do(ctx, control.OpSubscribe, control.SubscribeArgs{Topics: []string{control.TopicState, control.TopicApproval}}, nil, nil); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	// Pids of apps started before the subscription.
	var st control.StatusData
	if err := c.admin.do(ctx, control.OpStatus, control.StatusArgs{}, &st, nil); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	for _, a := range st.Apps {
		c.sawState(control.StateEvent{App: a.ID, State: a.State, Pid: a.Pid})
	}
	// Consent prompts raised before the subscription.
	var pend control.ApprovalsData
	if err := c.admin.do(ctx, control.OpApprovals, struct{}{}, &pend, nil); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	for _, a := range pend.Approvals {
		c.sawApproval(a)
	}
	c.krw.Lock()
	defer c.krw.Unlock()
	return c.attachLocked(ctx)
}

func (c *chaos) nextConn() int { return int(c.connSeq.Add(1)) }

// watchDrop notes a connection the daemon ended without our asking.
func (c *chaos) watchDrop(cn *conn, what string) {
	<-cn.done
	if _, ours := c.hungUp.Load(cn); !ours {
		c.dropped.Add(1)
		c.notef("the daemon ended the %s connection #%d: %v", what, cn.id, cn.Err())
	}
}

func (c *chaos) onWatchEvent(_ *conn, name string, line []byte) {
	switch name {
	case control.TopicState:
		var ev control.StateEvent
		if json.Unmarshal(line, &ev) == nil {
			c.sawState(ev)
		}
	case control.TopicApproval:
		var a control.Approval
		if json.Unmarshal(line, &a) == nil {
			c.sawApproval(a)
		}
	}
}

func (c *chaos) sawState(ev control.StateEvent) {
	c.mu.Lock()
	c.states[ev.App] = ev.State
	if ev.State == "running" && ev.Pid > 0 {
		c.pids[ev.App] = ev.Pid
	} else if ev.State != "starting" {
		delete(c.pids, ev.App)
		delete(c.contexts, ev.App)
	}
	d := c.d
	c.mu.Unlock()
	if ev.Pid > 0 && d != nil {
		c.procs.Track(ev.Pid, ev.App, d.Pid())
	}
}

func (c *chaos) sawApproval(a control.Approval) {
	if a.State != "pending" {
		return
	}
	if a.Kind == "consent" {
		c.consentAsked[c.gen].Add(1)
	}
	select {
	case c.approvals <- approverJob{approval: &a}:
	default:
		c.notef("approval %s not handled: the approver's queue is full", a.ApprovalID)
	}
}

// waitAppsReady waits until every app runs with a context for each
// account.
func (c *chaos) waitAppsReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := c.notReady(ctx)
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d apps not running with their contexts after %v: %s; %s", len(missing), timeout, strings.Join(first(missing, 8), ", "), c.d.LogTail(10))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func (c *chaos) notReady(ctx context.Context) []string {
	var missing []string
	for _, app := range c.apps {
		ids, err := c.listContexts(ctx, app)
		if err != nil || len(ids) < len(accounts) {
			missing = append(missing, app)
		}
	}
	return missing
}

func (c *chaos) listContexts(ctx context.Context, app string) ([]string, error) {
	var d struct {
		Contexts []struct {
			ContextID string `json:"context_id"`
		} `json:"contexts"`
	}
	if err := c.admin.do(ctx, opContextList, control.AppArgs{App: app}, &d, nil); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(d.Contexts))
	for _, x := range d.Contexts {
		ids = append(ids, x.ContextID)
	}
	c.mu.Lock()
	c.contexts[app] = ids
	c.mu.Unlock()
	return ids, nil
}

func (c *chaos) debug(ctx context.Context) (debugData, error) {
	var d debugData
	if err := c.admin.do(ctx, opDebug, map[string]bool{"gc": true}, &d, nil); err != nil {
		return d, fmt.Errorf("debug op (daemon/debug_ops.go): %w", err)
	}
	return d, nil
}

// settle polls the daemon's figures until they are within budget of base,
// or timeout; it returns the last figures and what was over.
func (c *chaos) settle(ctx context.Context, base debugData, accepted int, timeout time.Duration) (debugData, string) {
	deadline := time.Now().Add(timeout)
	for {
		d, err := c.debug(ctx)
		if err != nil {
			return d, err.Error()
		}
		why := withinBudget(base, d, accepted, len(c.apps))
		if why == "" || time.Now().After(deadline) || ctx.Err() != nil {
			return d, why
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// drain waits until every accepted call has its outcome, or until the
// latest deadline among the open ones is well past.
func (c *chaos) drain(ctx context.Context, what string) {
	// The daemon times a call out on its own clock and the outcome then
	// crosses a loaded machine: the grace is generous, and no timing is
	// asserted, only that the outcome comes.
	const grace = 20 * time.Second
	start := time.Now()
	for {
		n, latest := c.led.Open()
		if n == 0 {
			c.progressf("%s: every accepted call has its outcome (drained in %v)", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(latest.Add(grace)) || ctx.Err() != nil {
			c.progressf("%s: %d accepted calls without an outcome %v after the last deadline", what, n, grace)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restoreApps starts every app that is not running and waits for its
// contexts, so the daemon is in the baseline's shape again.
func (c *chaos) restoreApps(ctx context.Context) error {
	for _, app := range c.apps {
		c.mu.Lock()
		st := c.states[app]
		c.mu.Unlock()
		if st == "running" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.admin.do(sctx, control.OpStart, control.AppArgs{App: app}, nil, nil)
		cancel()
		if err != nil {
			var cerr *control.Error
			if !errors.As(err, &cerr) || !strings.Contains(cerr.Message, "running") {
				c.notef("start %s after the storm: %v", app, err)
			}
		}
	}
	return c.waitAppsReady(ctx, 2*time.Minute)
}

func (c *chaos) expectedRules() map[string]string {
	c.rulesMu.Lock()
	defer c.rulesMu.Unlock()
	out := make(map[string]string, len(c.rules))
	for k, v := range c.rules {
		out[k] = v
	}
	return out
}

// checkRules compares the daemon's standing rules with want.
func (c *chaos) checkRules(ctx context.Context, want map[string]string, when string) error {
	var d struct {
		Rules []policy.Rule `json:"rules"`
	}
	if err := c.admin.do(ctx, opRules, map[string]string{"action": "list"}, &d, nil); err != nil {
		return fmt.Errorf("rules list %s: %w", when, err)
	}
	got := map[string]string{}
	for _, r := range d.Rules {
		got[r.App+"/"+r.Tool] = string(r.Decision)
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			c.led.Violatef("%s: the standing rule %s = %s (approve --remember answered ok) is %q in the rules op", when, k, want[k], got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			c.led.Violatef("%s: a standing rule %s = %s that no approve --remember answered ok made (or a revoke answered ok removed)", when, k, v)
		}
	}
	return nil
}

// sanityCalls makes one plain call into each app after the restart.
func (c *chaos) sanityCalls(ctx context.Context) int {
	n := 0
	for i, app := range c.apps {
		ids, err := c.listContexts(ctx, app)
		if err != nil || len(ids) == 0 {
			c.led.Violatef("after restart: app %s has no context: %v", app, err)
			continue
		}
		spec := callSpec{App: app, ID: fmt.Sprintf("g%d-sanity-%d", c.gen, i), Tool: tools[0], Risk: "read", Confirm: "none", TimeoutMS: 30_000, Do: "ok"}
		c.sendCall(ctx, spec, ids[0])
		n++
	}
	return n
}
