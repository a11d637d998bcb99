package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// measurements is every section of the table, in the order they run.
// The spawn section runs first: later ones compare with its rows.
func measurements() []Measurement {
	roundTrip := &roundTripFlags{} // tools' and requests' shared flags
	return []Measurement{
		spawnMeasurement(),
		crashMeasurement(),
		scaleMeasurement(),
		toolsMeasurement(roundTrip),
		requestsMeasurement(roundTrip),
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes: a missed goal is not a failure (figures are reported, never
// asserted); a measurement that could not run is.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ms := measurements()
	fs := flag.NewFlagSet("octosup-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		asJSON   = fs.Bool("json", false, "print the report as JSON instead of a table")
		only     = fs.String("only", "", "run only these sections, comma-separated (default: all; see --list)")
		list     = fs.Bool("list", false, "say what each section measures, and exit")
		octo     = fs.String("octosupd", "bin/octosupd", "the daemon to measure")
		hubping  = fs.String("hubping", "bin/bench/hubping", "the tiny app (CGO_ENABLED=0 go build -o bin/bench/ ./bench/hubping)")
		bwrap    = fs.String("bwrap", "auto", `bubblewrap for the spawn baseline: a path, "auto" ($PATH) or "none"`)
		timeout  = fs.Duration("timeout", 10*time.Second, "bound of one operation (a start, an event)")
		keep     = fs.Bool("keep", false, "keep the scratch directory (daemon logs, manifests) and print where it is")
		jsonecho = fs.String("jsonecho", "", "the floor of tools and requests (bench/jsonecho; default: next to --hubping)")
		toolapp  = fs.String("toolapp", "", "the app of tools and requests (bench/toolapp; default: next to --hubping)")
	)
	for _, m := range ms {
		if m.Flags != nil {
			m.Flags(fs)
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: octosup-bench [flags]\n\nMeasures octosupd against baselines run alongside (make bench; docs/performance.md).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "octosup-bench: unexpected argument %q (flags only; see -h)\n", fs.Arg(0))
		return exitUsage
	}
	if *list {
		for _, m := range ms {
			fmt.Fprintf(stdout, "%s: %s\n  %s\n\n", m.Name, m.Title, m.About)
		}
		return exitOK
	}
	selected, err := selectMeasurements(ms, *only)
	if err != nil {
		fmt.Fprintf(stderr, "octosup-bench: %v\n", err)
		return exitUsage
	}
	env, cleanup, err := newEnv(*octo, *hubping, *bwrap, *timeout, *keep, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "octosup-bench: %v\n", err)
		return exitUsage
	}
	defer cleanup()
	env.JSONEcho, env.ToolApp = *jsonecho, *toolapp

	rep := &Report{Started: time.Now(), Machine: machine(env)}
	failed := measureAll(ctx, env, rep, selected)
	rep.Duration = time.Since(rep.Started)
	rep.Machine.LoadEnd = loadavg()
	if *asJSON {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "octosup-bench: %v\n", err)
		return exitFailed
	}
	if failed {
		fmt.Fprintln(stderr, "octosup-bench: some figures could not be measured (see above); rerun with --keep to read the daemons' logs")
		return exitFailed
	}
	return exitOK
}

// measureAll runs the selected sections into rep, until ctx ends; failed
// is a section that could not be run or a figure that could not be taken.
func measureAll(ctx context.Context, env *Env, rep *Report, selected []Measurement) (failed bool) {
	for _, m := range selected {
		t0 := time.Now()
		rows, err := m.Run(ctx, env)
		for i := range rows {
			rows[i].finish()
		}
		sec := Section{Name: m.Name, Title: m.Title, About: m.About, Rows: rows, Duration: time.Since(t0)}
		if err != nil {
			sec.Err = err.Error()
			failed = true
			env.Progressf("%s failed: %v", m.Name, err)
		}
		for _, r := range rows {
			if r.Err != "" && !strings.HasPrefix(r.Err, "skipped") && !strings.HasPrefix(r.Err, "no figure") {
				failed = true
			}
		}
		env.remember(rows)
		rep.Sections = append(rep.Sections, sec)
		if ctx.Err() != nil {
			break
		}
	}
	return failed
}

func selectMeasurements(ms []Measurement, only string) ([]Measurement, error) {
	if strings.TrimSpace(only) == "" {
		return ms, nil
	}
	var names []string
	byName := map[string]Measurement{}
	for _, m := range ms {
		names = append(names, m.Name)
		byName[m.Name] = m
	}
	var out []Measurement
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		n = strings.TrimSpace(n)
		if _, ok := byName[n]; !ok {
			return nil, fmt.Errorf("--only: no section %q (there are: %s)", n, strings.Join(names, ", "))
		}
		want[n] = true
	}
	for _, m := range ms { // the registry's order, whatever --only's
		if want[m.Name] {
			out = append(out, m)
		}
	}
	return out, nil
}

// newEnv resolves the binaries and makes the scratch directory.
func newEnv(octo, hubping, bwrap string, timeout time.Duration, keep bool, progress io.Writer) (*Env, func(), error) {
	var err error
	if octo, err = executable(octo, "the daemon", "make build, or pass --octosupd"); err != nil {
		return nil, nil, err
	}
	if hubping, err = executable(hubping, "the tiny app", "CGO_ENABLED=0 go build -o bin/bench/ ./bench/hubping, or pass --hubping"); err != nil {
		return nil, nil, err
	}
	switch bwrap {
	case "none", "":
		bwrap = ""
	case "auto":
		bwrap, _ = exec.LookPath("bwrap")
	default:
		if bwrap, err = executable(bwrap, "bubblewrap", "apt-get install bubblewrap, or --bwrap none"); err != nil {
			return nil, nil, err
		}
	}
	dir, err := os.MkdirTemp("", "octosup-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("scratch directory: %w", err)
	}
	env := &Env{Octosupd: octo, Hubping: hubping, Bwrap: bwrap, Dir: dir, Timeout: timeout, Progress: progress}
	cleanup := func() {
		if keep {
			fmt.Fprintf(progress, "bench: the scratch directory is kept: %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}
	return env, cleanup, nil
}

// executable is p made absolute (a manifest's exec[0] must be), checked
// to be an executable file.
func executable(p, what, fix string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w (%s)", what, err, fix)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s: %s is not an executable file (%s)", what, abs, fix)
	}
	return abs, nil
}

func machine(env *Env) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadStart: loadavg(), Bwrap: env.Bwrap}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
	if abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1); errno == 0 {
		m.LandlockABI = int(abi)
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
