package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs the program: 0 when every invariant held, 1 on a violation,
// 2 on bad flags or a run that could not be made.
func cli(args []string, stdout, stderr io.Writer) int {
	cfg, ok := parseConfig(args, stdout, stderr)
	if !ok {
		return 2
	}
	fmt.Fprintf(stdout, "octosup-chaos: seed %d (replay: --seed %d --apps %d --duration %v --workers %d)\n", cfg.Seed, cfg.Seed, cfg.Apps, cfg.Duration, cfg.Workers)

	made := cfg.Dir == ""
	if made {
		d, err := os.MkdirTemp("", "octosup-chaos-")
		if err != nil {
			fmt.Fprintf(stderr, "octosup-chaos: scratch directory: %v\n", err)
			return 2
		}
		cfg.Dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The run stops by itself: the storm, start-ups and drains are each
	// bounded; this is the backstop.
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+6*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	fmt.Fprint(stdout, res.Report)
	code := 0
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "octosup-chaos: %v\n", err)
		code = 2
		if len(res.Violations) > 0 {
			code = 1
		}
	case len(res.Violations) > 0:
		code = 1
	}
	if code == 0 && made && !cfg.Keep {
		os.RemoveAll(cfg.Dir)
	} else {
		fmt.Fprintf(stdout, "the daemon's tree and logs are in %s\n", cfg.Dir)
	}
	if code == 1 {
		fmt.Fprintf(stdout, "FAIL: %d violation(s); replay with --seed %d\n", len(res.Violations), cfg.Seed)
	} else if code == 0 {
		fmt.Fprintln(stdout, "PASS")
	}
	return code
}

// parseConfig reads the command line; a false ok has been explained on
// stderr.
func parseConfig(args []string, stdout, stderr io.Writer) (_ config, ok bool) {
	fs := flag.NewFlagSet("octosup-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	self, _ := os.Executable()
	cfg := config{Out: stdout, Progress: stderr}
	fs.StringVar(&cfg.Octosupd, "octosupd", filepath.Join(filepath.Dir(self), "octosupd"), "the octosupd binary (octosup-jail next to it, as make build puts them)")
	fs.StringVar(&cfg.App, "app", filepath.Join(filepath.Dir(self), "chaos", "app"), "the chaos app binary (chaos/app)")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the storm lasts (the run adds start-up, drain and restart)")
	fs.IntVar(&cfg.Apps, "apps", 60, "apps in the manifest")
	fs.IntVar(&cfg.Workers, "workers", 12, "kernel goroutines issuing calls")
	seed := fs.Uint64("seed", 0, "the seed of every random choice (0: one drawn from the clock, printed)")
	fs.DurationVar(&cfg.MaxDeadline, "max-deadline", 5*time.Second, "the longest deadline a call gets (bounds the drain)")
	fs.StringVar(&cfg.Dir, "dir", "", "scratch directory for the daemon's HOME and XDG tree (default: a new one under $TMPDIR)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (it is always kept after a violation)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		return cfg, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "octosup-chaos: unexpected arguments %q\n", fs.Args())
		return cfg, false
	}
	if cfg.Apps < 1 || cfg.Workers < 1 || cfg.Duration <= 0 || cfg.MaxDeadline < 10*time.Millisecond {
		fmt.Fprintln(stderr, "octosup-chaos: --apps and --workers must be positive, --duration positive, --max-deadline at least 10ms")
		return cfg, false
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if *quiet {
		cfg.Progress = nil
	}
	for _, bin := range []string{cfg.Octosupd, cfg.App} {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(stderr, "octosup-chaos: %v (build them with make build, or run make chaos)\n", err)
			return cfg, false
		}
	}
	return cfg, true
}
