package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"octosup/control"
	"octosup/jail"
	"octosup/policy"
)

func spawnMeasurement() Measurement {
	var n int
	return Measurement{
		Name:  "spawn",
		Title: "start → the app's first byte (hubping, one start at a time, variants interleaved)",
		About: "Time from \"start\" to the first byte the same tiny app writes: (a) os/exec with a socketpair as fd 3, " +
			"(b) octosupd policy broad, (c) octosupd jail with network none and processes false, (c') the same with " +
			"processes true (both spawned in-process, octosupd's default), (c1) and (c1') the same through the jail helper " +
			"octosup-jail (octosupd --jail-spawn helper), (d) bwrap --unshare-all with the jail's binds; (h') starts and " +
			"ends octosup-jail with no spec. " +
			"The app writes its hub (fd 3) and then a " +
			"FIFO the bench holds; the daemon owns the hub of (b) and (c), so every variant is timed to the FIFO byte, " +
			"and (a) and (d) to the hub byte too, which shows what the FIFO adds.",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&n, "spawns", 200, "spawns of each variant")
		},
		Run: func(ctx context.Context, env *Env) ([]Row, error) { return runSpawn(ctx, env, n) },
	}
}

// spawnSample is one start; a zero field was not measured.
type spawnSample struct {
	hub    time.Duration // → the byte on the hub (variants that hold it)
	fifo   time.Duration // → the byte on the FIFO (every variant)
	answer time.Duration // → the start op's answer (daemon variants)
}

type spawnVariant struct {
	id    string // a, b, c, c', c1, c1', h', d
	key   string
	label string
	once  func(ctx context.Context) (spawnSample, error)

	samples []spawnSample
	err     error
}

func runSpawn(ctx context.Context, env *Env, n int) ([]Row, error) {
	if n < 1 {
		return nil, errors.New("--spawns must be at least 1")
	}
	dir, childLog, err := env.ScratchLog("spawn", "children.log")
	if err != nil {
		return nil, err
	}
	defer childLog.Close()

	fifos := map[string]*fifo{}
	for _, id := range []string{"plain", "broad", "jail", "jail-procs", "jail-helper", "jail-procs-helper", "bwrap"} {
		f, err := appFIFO(dir, id)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fifos[id] = f
	}

	d, conn, stop, err := env.startConnected(ctx, "spawn-daemon", []policy.App{
		hubpingApp("broad", env.Hubping, fifos["broad"], broadSandbox(), false),
		hubpingApp("jail", env.Hubping, fifos["jail"], jailSandbox(false), false),
		hubpingApp("jail-procs", env.Hubping, fifos["jail-procs"], jailSandbox(true), false),
	}, nil)
	if err != nil {
		return nil, err
	}
	defer stop()

	// The helper path, in the same run: a daemon that starts every app
	// through octosup-jail, as every start was before the in-process
	// spawn.
	tiny := filepath.Join(filepath.Dir(env.Octosupd), jail.HelperName)
	if _, err := os.Stat(tiny); err != nil {
		return nil, fmt.Errorf("%s is not next to %s (make bench builds both): %w", jail.HelperName, env.Octosupd, err)
	}
	d1, conn1, stop1, err := env.startConnected(ctx, "spawn-daemon-helper", []policy.App{
		hubpingApp("jail", env.Hubping, fifos["jail-helper"], jailSandbox(false), false),
		hubpingApp("jail-procs", env.Hubping, fifos["jail-procs-helper"], jailSandbox(true), false),
	}, []string{"--jail-spawn", "helper"})
	if err != nil {
		return nil, err
	}
	defer stop1()

	variants := []*spawnVariant{
		{id: "a", key: "spawn.plain", label: "a   os/exec, socketpair as fd 3",
			once: plainSpawn(env, []string{env.Hubping, fifos["plain"].Path}, fifos["plain"], childLog)},
		{id: "b", key: "spawn.broad", label: "b   octosupd, policy broad",
			once: daemonSpawn(env, d, conn, "broad", fifos["broad"])},
		{id: "c", key: "spawn.jail", label: "c   octosupd, jail: network none, processes false",
			once: daemonSpawn(env, d, conn, "jail", fifos["jail"])},
		{id: "c'", key: "spawn.jail-procs", label: "c'  octosupd, jail: network none, processes true",
			once: daemonSpawn(env, d, conn, "jail-procs", fifos["jail-procs"])},
		{id: "c1", key: "spawn.jail-helper", label: "c1  the same as c, through octosup-jail",
			once: daemonSpawn(env, d1, conn1, "jail", fifos["jail-helper"])},
		{id: "c1'", key: "spawn.jail-procs-helper", label: "c1' the same as c', through octosup-jail",
			once: daemonSpawn(env, d1, conn1, "jail-procs", fifos["jail-procs-helper"])},
		// The helper's floor: run with no spec to read, it exits once the
		// Go runtime and the package inits ran: what every start through
		// it pays before any jail work.
		{id: "h'", key: "spawn.helper-floor", label: "h'  octosup-jail, no spec",
			once: helperFloor(tiny, childLog)},
	}
	bw := &spawnVariant{id: "d", key: "spawn.bwrap", label: "d   bwrap --unshare-all, same binds"}
	if env.Bwrap != "" {
		f := fifos["bwrap"]
		bw.once = plainSpawn(env, bwrapArgs(env.Bwrap, filepath.Dir(f.Path), []string{env.Hubping, f.Path}), f, childLog)
		variants = append(variants, bw)
	} else {
		bw.err = errors.New("skipped: no bwrap (apt-get install bubblewrap, and no --bwrap none)")
	}

	err = spawnRounds(ctx, env, n, variants)
	return spawnRows(append(variants[:7:7], bw)), err
}

// spawnRounds runs n rounds of the variants. A variant that fails is
// dropped from the rounds, keeps the samples it had, and fails the run.
func spawnRounds(ctx context.Context, env *Env, n int, variants []*spawnVariant) error {
	// Round-robin, the order turning every round, so that the machine's
	// drift (other engineers' builds) falls on every variant alike.
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i%50 == 0 {
			env.Progressf("spawn: round %d/%d", i, n)
		}
		for k := range variants {
			v := variants[(i+k)%len(variants)]
			if v.err != nil {
				continue
			}
			s, err := v.once(ctx)
			if err != nil {
				v.err = fmt.Errorf("spawn %d: %w", len(v.samples)+1, err)
				env.Progressf("spawn: %s failed, dropped from the rounds: %v", v.id, v.err)
				continue
			}
			v.samples = append(v.samples, s)
		}
	}
	// A variant that failed keeps the rows it had, and fails the run.
	var errs []error
	for _, v := range variants {
		if v.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.id, v.err))
		}
	}
	return errors.Join(errs...)
}

// spawnRows turns the samples into rows: each variant to the FIFO byte
// (and the hub byte, the start's answer where measured), then the
// ratios of medians.
func spawnRows(vs []*spawnVariant) []Row {
	var rows []Row
	byID := map[string]Row{}
	for _, v := range vs {
		var hub, fifo, answer, extra []time.Duration
		for _, s := range v.samples {
			fifo = append(fifo, s.fifo)
			if s.hub > 0 {
				hub = append(hub, s.hub)
				extra = append(extra, s.fifo-s.hub)
			}
			if s.answer > 0 {
				answer = append(answer, s.answer)
			}
		}
		if len(hub) > 0 {
			rows = append(rows, summarize(hub).row(v.key+".hub", v.label+" → hub byte"))
		}
		to := " → FIFO byte"
		if v.id == "h'" {
			to = " → exit"
		}
		r := summarize(fifo).row(v.key, v.label+to)
		if v.err != nil {
			if len(fifo) == 0 {
				r = Row{Key: v.key, Label: v.label + to, Err: v.err.Error()}
			} else {
				r.Note = "stopped early: " + v.err.Error()
			}
		}
		if len(extra) > 0 {
			r.Note = join(r.Note, fmt.Sprintf("the FIFO byte comes %v (median) after the hub byte: the app's open and write of the FIFO", summarize(extra).P50.Round(time.Microsecond)))
		}
		byID[v.id] = r
		rows = append(rows, r)
		if len(answer) > 0 {
			rows = append(rows, summarize(answer).row(v.key+".answer", v.label+" → start answered (running)"))
		}
	}
	ratio := func(num, den, label string, goal *Goal) Row {
		key := fmt.Sprintf("spawn.ratio.%s/%s", num, den)
		return ratioRow(key, label, num+"/"+den+" p50", byID[num], byID[den], goal)
	}
	rows = append(rows,
		ratio("b", "a", "octosupd broad vs plain", nil),
		ratio("c", "a", "jailed, processes false vs plain", AtMost(2.0, "×")),
		ratio("c'", "a", "jailed, processes true vs plain", AtMost(1.5, "×")),
		ratio("c1", "a", "through octosup-jail, processes false vs plain", nil),
		ratio("c1'", "a", "through octosup-jail, processes true vs plain", nil),
		ratio("c", "c1", "jailed, processes false: in-process vs octosup-jail", nil),
		ratio("d", "a", "bwrap vs plain", nil),
		ratio("c", "d", "jailed, processes false vs bwrap", nil),
		ratio("c'", "d", "jailed, processes true vs bwrap", nil),
	)
	// A start through the helper cannot beat a plain start plus the
	// helper's own exec: how close c1 comes to that floor is what the
	// daemon and the jail layers add.
	a, h := byID["a"], byID["h'"]
	if a.P50 != nil && h.P50 != nil {
		floor := Row{Key: "spawn.helper-path-floor", Label: "a+h' the helper path's floor (p50s added)",
			Value: &Value{X: a.P50.X + h.P50.X, Unit: "ms"}}
		rows = append(rows, floor, ratioRow("spawn.ratio.c1/a+h'", "through octosup-jail, processes false vs that floor", "c1/(a+h') p50", byID["c1"], floor, nil))
	}
	return rows
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// plainSpawn starts argv itself (a, d): start → hub byte → FIFO byte,
// then kills and reaps it.
func plainSpawn(env *Env, argv []string, f *fifo, logw *os.File) func(context.Context) (spawnSample, error) {
	return func(context.Context) (spawnSample, error) {
		t0 := time.Now()
		c, err := startChild(argv, logw)
		if err != nil {
			return spawnSample{}, err
		}
		defer c.kill()
		hubAt, err := awaitByte(c.hub, env.Timeout)
		if err != nil {
			return spawnSample{}, fmt.Errorf("the hub: %w (the children's output is in %s)", err, logw.Name())
		}
		fifoAt, err := f.await(env.Timeout)
		if err != nil {
			return spawnSample{}, fmt.Errorf("the FIFO: %w (the children's output is in %s)", err, logw.Name())
		}
		return spawnSample{hub: hubAt.Sub(t0), fifo: fifoAt.Sub(t0)}, nil
	}
}

// daemonSpawn has octosupd start the app (b, c, c'): start sent → FIFO
// byte, and → the start's answer; then stops it for the next round.
func daemonSpawn(env *Env, d *daemon, conn *control.Conn, app string, f *fifo) func(context.Context) (spawnSample, error) {
	return func(ctx context.Context) (spawnSample, error) {
		ctx, cancel := context.WithTimeout(ctx, env.Timeout)
		defer cancel()
		type answer struct {
			at  time.Time
			err error
		}
		ans := make(chan answer, 1)
		t0 := time.Now()
		go func() {
			err := conn.Do(ctx, control.OpStart, control.AppArgs{App: app}, nil)
			ans <- answer{time.Now(), err}
		}()
		fifoAt, ferr := f.await(env.Timeout)
		a := <-ans
		if a.err != nil {
			return spawnSample{}, fmt.Errorf("start %s: %w; %s", app, a.err, d.appLogs(context.Background(), app))
		}
		if ferr != nil {
			defer conn.Do(context.Background(), control.OpStop, control.AppArgs{App: app}, nil)
			return spawnSample{}, fmt.Errorf("%s's FIFO: %w; %s", app, ferr, d.appLogs(context.Background(), app))
		}
		if err := conn.Do(ctx, control.OpStop, control.AppArgs{App: app}, nil); err != nil {
			return spawnSample{}, fmt.Errorf("stop %s: %w", app, err)
		}
		return spawnSample{fifo: fifoAt.Sub(t0), answer: a.at.Sub(t0)}, nil
	}
}

// helperFloor times exec → exit of a jail helper binary (octosupd or
// octosup-jail) run without the descriptors it needs: it gives up at
// once, after the Go runtime started and the packages initialized.
func helperFloor(bin string, logw *os.File) func(context.Context) (spawnSample, error) {
	return func(context.Context) (spawnSample, error) {
		cmd := exec.Command(bin, jail.HelperArg)
		cmd.Stdout, cmd.Stderr = logw, logw
		t0 := time.Now()
		err := cmd.Run()
		dt := time.Since(t0)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Exited() {
			return spawnSample{}, fmt.Errorf("%s %s should fail at once without its descriptors, but: %v", bin, jail.HelperArg, err)
		}
		return spawnSample{fifo: dt}, nil
	}
}
