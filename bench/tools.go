package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// roundTripFlags are the flags the tool-call and request sections share.
type roundTripFlags struct {
	inflight int
	rounds   int
	sandbox  string
}

func toolsMeasurement(shared *roundTripFlags) Measurement {
	var calls, pipelinedCalls int
	return Measurement{
		Name:  "tools",
		Title: "tool calls: kernel on the control socket → octosupd → app → kernel (interleaved with the floor)",
		About: "tool.call lines written by a kernel attached on the control socket with raw lines, each complete at its " +
			"tool.finished event; the app (bench/toolapp) answers every tool_call at once with ok. One call at a time (p50, " +
			"p99, calls/s) and --inflight at a time. The floor: the same tool.call bytes echoed by a second Go process " +
			"(bench/jsonecho) over a socketpair, one write per line each way; and the same through a Go relay process " +
			"(jsonecho relay) in front of the echo, four processes' sockets as a call crosses, without the daemon's work.",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&calls, "calls", 2000, "tool calls one at a time (and echoes of the floor)")
			fs.IntVar(&pipelinedCalls, "calls-pipelined", 20000, "tool calls with --inflight in flight (and echoes)")
			fs.IntVar(&shared.inflight, "inflight", 64, "round trips in flight in the pipelined runs of tools and requests")
			fs.IntVar(&shared.rounds, "rounds", 5, "rounds the tools and requests runs are split in, alternating with their floor")
			fs.StringVar(&shared.sandbox, "tool-sandbox", "jail", `the tool app's sandbox: "jail" (network none, processes false) or "broad"`)
		},
		Run: func(ctx context.Context, env *Env) ([]Row, error) {
			return runRoundTrips(ctx, env, shared, roundTripSection{
				name: "tools", n1: calls, nK: pipelinedCalls,
				floorLabel: "floor: JSON echo of the tool.call line, two Go processes",
				realLabel:  "tool call, kernel → octosupd → app → kernel",
				unit:       "calls/s",
				ratioP50:   AtMost(1.5, "×"), ratioRate: AtLeast(0.7, "×"),
				line: toolCallLine, id: toolCallID,
				setup: toolTrips,
			})
		},
	}
}

func requestsMeasurement(shared *roundTripFlags) Measurement {
	var requests, pipelinedRequests int
	return Measurement{
		Name:  "requests",
		Title: "requests: app → octosupd → kernel → octosupd → app (interleaved with the floor)",
		About: "octos.turn.interrupt requests of the app (bench/toolapp) on its open context, timed by the app from its " +
			"write to the reply; the kernel, attached on the control socket with raw lines, answers each request event at " +
			"once with request.reply. One at a time and --inflight at a time. The floor: the same request bytes echoed " +
			"by a second Go process (bench/jsonecho) over a socketpair, and through a relay in front of it (as tools).",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&requests, "requests", 2000, "requests one at a time (and echoes of the floor)")
			fs.IntVar(&pipelinedRequests, "requests-pipelined", 20000, "requests with --inflight in flight (and echoes)")
		},
		Run: func(ctx context.Context, env *Env) ([]Row, error) {
			return runRoundTrips(ctx, env, shared, roundTripSection{
				name: "requests", n1: requests, nK: pipelinedRequests,
				floorLabel: "floor: JSON echo of the request line, two Go processes",
				realLabel:  "request, app → octosupd → kernel → app",
				unit:       "requests/s",
				ratioP50:   AtMost(1.5, "×"),
				line:       requestLine, id: requestID,
				setup: requestTrips,
			})
		},
	}
}

// roundTripSection is what the tools and requests sections differ in.
type roundTripSection struct {
	name                  string
	n1, nK                int // round trips one at a time, and in flight
	floorLabel, realLabel string
	unit                  string
	// The goals of real/floor: p50 one at a time, rate in flight.
	ratioP50, ratioRate *Goal
	// line is the bytes of round trip N that the floor echoes (what the
	// one who starts a round trip writes), id the id of N in what
	// comes back.
	line func(buf []byte, n int, contextID string) []byte
	id   func(line []byte) (string, error)
	// setup starts the real path against a running rig; stop (never nil)
	// ends what it started.
	setup func(ctx context.Context, rig *appRig) (real tripRunner, stop func() error)
}

// tripRunner runs n round trips, k in flight, and returns their times and
// the run's.
type tripRunner func(n, k int) ([]time.Duration, time.Duration, error)

// toolTrips: the kernel's tool calls.
func toolTrips(_ context.Context, rig *appRig) (tripRunner, func() error) {
	next := 0
	kt := &kernelTrips{k: rig.kernel, contextID: rig.contextID}
	real := func(n, k int) ([]time.Duration, time.Duration, error) {
		kt.base, next = next, next+n
		return withDeadline(rig.kernel, rig.timeout, n, func() ([]time.Duration, time.Duration, error) { return pipelined(n, k, kt) })
	}
	return real, func() error { return nil }
}

// requestTrips: the app's requests, answered by a kernel goroutine.
func requestTrips(ctx context.Context, rig *appRig) (tripRunner, func() error) {
	answered := make(chan error, 1)
	go func() { answered <- rig.answerRequests() }()
	real := func(n, k int) ([]time.Duration, time.Duration, error) {
		lat, el, err := rig.appRequests(ctx, n, k)
		if err != nil {
			select {
			case kerr := <-answered: // the kernel's side stopped first: that is why
				answered <- kerr
				err = fmt.Errorf("%w (the kernel: %v)", err, kerr)
			default:
			}
		}
		return lat, el, err
	}
	stop := func() error {
		rig.kernel.nc.Close()
		return <-answered
	}
	return real, stop
}

// echoRunner runs round trips through an echo (or a relay).
func echoRunner(e *echoProc, s roundTripSection, contextID string, timeout time.Duration) tripRunner {
	next := 0
	et := &echoTrips{e: e, id: s.id, line: func(buf []byte, n int) []byte { return s.line(buf, n, contextID) }}
	return func(n, k int) ([]time.Duration, time.Duration, error) {
		et.base, next = next, next+n
		return withDeadline(e.lineConn, timeout, n, func() ([]time.Duration, time.Duration, error) { return pipelined(n, k, et) })
	}
}

// withDeadline bounds a run of n round trips on c: the bench's timeout
// and a millisecond for each.
func withDeadline(c *lineConn, timeout time.Duration, n int, run func() ([]time.Duration, time.Duration, error)) ([]time.Duration, time.Duration, error) {
	c.nc.SetDeadline(time.Now().Add(timeout + time.Duration(n)*time.Millisecond))
	defer c.nc.SetDeadline(time.Time{})
	return run()
}

// program is a helper program of the bench: path, or name next to
// hubping when path is "".
func (e *Env) program(path, name string) (string, error) {
	if path == "" {
		path = filepath.Join(filepath.Dir(e.Hubping), name)
	}
	return executable(path, "bench/"+name, fmt.Sprintf("CGO_ENABLED=0 go build -o %s/ ./bench/%s (make bench does), or pass --%s", filepath.Dir(path), name, name))
}

// tripTotals gathers one variant's runs.
type tripTotals struct {
	lat     []time.Duration
	elapsed time.Duration
	cpu     map[string]time.Duration // of each process taking part, over the runs
}

// proc is a process taking part in a variant, for its CPU time.
type proc struct {
	name string
	pid  int
}

// cpuRow is the CPU time per round trip of all the processes of the
// runs, with each one's in the note (in the order of procs).
func (t *tripTotals) cpuRow(key, label string, procs []proc) Row {
	r := Row{Key: key, Label: label}
	if len(t.lat) == 0 || t.cpu == nil {
		r.Err = "no samples"
		return r
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(len(t.lat)) }
	var total time.Duration
	var parts []string
	for _, p := range procs {
		total += t.cpu[p.name]
		parts = append(parts, fmt.Sprintf("%s %.1f", p.name, per(t.cpu[p.name])))
	}
	r.Value = &Value{X: per(total), Unit: "µs CPU"}
	r.Note = fmt.Sprintf("µs of CPU per round trip: %s (user + system, /proc/PID/stat)", strings.Join(parts, ", "))
	return r
}

// timedCPU runs run and adds the CPU time each of procs spent meanwhile
// to into.
func timedCPU(procs []proc, into *tripTotals, run func() error) error {
	before := make([]time.Duration, len(procs))
	for i, p := range procs {
		c, err := cpuTime(p.pid)
		if err != nil {
			return fmt.Errorf("the CPU time of %s: %w", p.name, err)
		}
		before[i] = c
	}
	if err := run(); err != nil {
		return err
	}
	if into.cpu == nil {
		into.cpu = make(map[string]time.Duration)
	}
	for i, p := range procs {
		c, err := cpuTime(p.pid)
		if err != nil {
			return fmt.Errorf("the CPU time of %s: %w", p.name, err)
		}
		into.cpu[p.name] += c - before[i]
	}
	return nil
}

func (t *tripTotals) add(lat []time.Duration, el time.Duration) {
	t.lat = append(t.lat, lat...)
	t.elapsed += el
}

// row is the distribution and the rate of the runs.
func (t *tripTotals) row(key, label, unit string) Row {
	r := summarize(t.lat).row(key, label)
	if r.Err == "" && t.elapsed > 0 {
		r.Value = &Value{X: float64(len(t.lat)) / t.elapsed.Seconds(), Unit: unit}
	}
	return r
}

// runRoundTrips measures a section: warm-up, then rounds alternating the
// floor and the real path (the order turning each round), one at a time
// and s.nK in flight, and the rows with their ratios.
func runRoundTrips(ctx context.Context, env *Env, f *roundTripFlags, s roundTripSection) ([]Row, error) {
	switch {
	case s.n1 < 1 || s.nK < 1:
		return nil, fmt.Errorf("%s: the counts must be at least 1", s.name)
	case f.inflight < 1:
		return nil, errors.New("--inflight must be at least 1")
	case f.rounds < 1:
		return nil, errors.New("--rounds must be at least 1")
	case s.nK/f.rounds > maxAppRequests || s.n1/f.rounds > maxAppRequests:
		return nil, fmt.Errorf("%s: at most %d round trips a round (raise --rounds)", s.name, maxAppRequests)
	}
	sb, err := toolSandbox(f.sandbox)
	if err != nil {
		return nil, err
	}
	echoPath, err := env.program(env.JSONEcho, "jsonecho")
	if err != nil {
		return nil, err
	}
	_, logw, err := env.ScratchLog(s.name, "jsonecho.log")
	if err != nil {
		return nil, err
	}
	defer logw.Close()
	rig, err := env.startAppRig(ctx, s.name+"-daemon", sb)
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	echo, err := startEcho(echoPath, false, logw)
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	relayed, err := startEcho(echoPath, true, logw)
	if err != nil {
		return nil, err
	}
	defer relayed.Close()
	floor := echoRunner(echo, s, rig.contextID, env.Timeout)
	relay := echoRunner(relayed, s, rig.contextID, env.Timeout)
	real, stop := s.setup(ctx, rig)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	self := os.Getpid()
	fl := &tripPath{name: "floor", run: floor, procs: []proc{{"bench", self}, {"echo", echo.cmds[0].Process.Pid}}}
	rl := &tripPath{name: "relay", run: relay, procs: []proc{{"bench", self}, {"echo", relayed.cmds[0].Process.Pid}, {"relay", relayed.cmds[1].Process.Pid}}}
	re := &tripPath{name: "real", run: real, procs: []proc{{"kernel (bench)", self}, {"octosupd", rig.daemonPid}, {"app", rig.appPid}}}
	if err := measureRounds(ctx, env, f, s, []*tripPath{fl, rl, re}); err != nil {
		return roundTripRows(f, s, fl, rl, re), err
	}
	stopped = true
	return roundTripRows(f, s, fl, rl, re), stop()
}

// tripPath is one of a section's three paths (the floor, the relay, the
// daemon): its runner, the processes its CPU is charged to, and its
// totals one at a time and in flight.
type tripPath struct {
	name      string
	run       tripRunner
	procs     []proc
	one, many tripTotals
}

// measureRounds warms the paths up, then runs s's rounds, alternating the
// paths one at a time and f.inflight at once, the order turning each round.
func measureRounds(ctx context.Context, env *Env, f *roundTripFlags, s roundTripSection, paths []*tripPath) error {
	// Warm-up, not counted: connections, buffers, the daemon's maps and
	// the Go runtimes' heaps grown to size.
	for _, p := range paths {
		for _, k := range []int{1, f.inflight} {
			if _, _, err := p.run(min(200*k, 2000), k); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	per1, perK := max(1, s.n1/f.rounds), max(1, s.nK/f.rounds)
	type step struct {
		path *tripPath
		n, k int
		into *tripTotals
	}
	for round := range f.rounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		env.Progressf("%s: round %d/%d", s.name, round+1, f.rounds)
		var one, many []step
		for _, p := range paths {
			one = append(one, step{p, per1, 1, &p.one})
			many = append(many, step{p, perK, f.inflight, &p.many})
		}
		if round%2 == 1 { // the other order: drift falls on all alike
			slices.Reverse(one)
			slices.Reverse(many)
		}
		for _, st := range append(one, many...) {
			err := timedCPU(st.path.procs, st.into, func() error {
				lat, el, err := st.path.run(st.n, st.k)
				st.into.add(lat, el)
				return err
			})
			if err != nil {
				what := st.path.name + ", 1 in flight"
				if st.k > 1 {
					what = st.path.name + ", in flight"
				}
				return fmt.Errorf("round %d, %s: %w", round+1, what, err)
			}
		}
	}
	return nil
}

// roundTripRows are a section's rows: each path's, one at a time and in
// flight, the ratios and the goals (against the relay), and CPU.
func roundTripRows(f *roundTripFlags, s roundTripSection, floor, relay, real *tripPath) []Row {
	k := fmt.Sprint(f.inflight)
	fl1 := floor.one.row(s.name+".floor.1", s.floorLabel+", 1 in flight", "msgs/s")
	rl1 := relay.one.row(s.name+".relay.1", relayLabel+", 1 in flight", "msgs/s")
	re1 := real.one.row(s.name+".real.1", s.realLabel+", 1 in flight", s.unit)
	flK := floor.many.row(s.name+".floor."+k, s.floorLabel+", "+k+" in flight", "msgs/s")
	rlK := relay.many.row(s.name+".relay."+k, relayLabel+", "+k+" in flight", "msgs/s")
	reK := real.many.row(s.name+".real."+k, s.realLabel+", "+k+" in flight", s.unit)
	re1.Note = fmt.Sprintf("the app (bench/toolapp) runs with policy %s", f.sandbox)
	if f.sandbox == "jail" {
		re1.Note += " (network none, processes false)"
	}
	return []Row{fl1, rl1, re1, flK, rlK, reK,
		ratioRow(s.name+".ratio.p50", "p50 vs the floor's, 1 in flight", "real/floor p50", re1, fl1, nil),
		ratioRow(s.name+".ratio.rate."+k, "rate vs the floor's, "+k+" in flight", "real/floor rate", rateOnly(reK), rateOnly(flK), nil),
		// The goals are against the relay: the echo floor has one
		// process fewer on the path than any daemon can.
		ratioRow(s.name+".ratio.p50.relay", "p50 vs the relay's, 1 in flight", "real/relay p50", re1, rl1, s.ratioP50),
		ratioRow(s.name+".ratio.rate.relay."+k, "rate vs the relay's, "+k+" in flight", "real/relay rate", rateOnly(reK), rateOnly(rlK), s.ratioRate),
		floor.many.cpuRow(s.name+".cpu.floor."+k, "CPU per round trip, "+k+" in flight: floor (bench + echo)", floor.procs),
		relay.many.cpuRow(s.name+".cpu.relay."+k, "CPU per round trip, "+k+" in flight: relay (bench + relay + echo)", relay.procs),
		real.one.cpuRow(s.name+".cpu.real.1", "CPU per round trip, 1 in flight: real (kernel + octosupd + app)", real.procs),
		real.many.cpuRow(s.name+".cpu.real."+k, "CPU per round trip, "+k+" in flight: real (kernel + octosupd + app)", real.procs),
	}
}

// relayLabel is the label of the relay rows.
const relayLabel = "floor: the same through a Go relay process (the daemon's place, no work)"

// rateOnly is r with its rate as its headline, for a ratio of rates.
func rateOnly(r Row) Row {
	return Row{Key: r.Key, Label: r.Label, Value: r.Value, Err: r.Err}
}

// maxAppRequests is bench/toolapp's bound of one requests run.
const maxAppRequests = 50000
