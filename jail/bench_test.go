package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// BenchmarkSpawn measures spawn-to-exit of /bin/true by every path an app
// can take, interleaved (one spawn of each path per round, the order
// turning every round, so that the machine's drift falls on all alike):
//
//   - plain: fork/exec with the same process attributes, no jail;
//   - floor/reexec, floor/octosup-jail: the helper binary started and
//     ended before any jail work (the runtime's start and the package
//     inits): this test binary, a cgo binary linking libseccomp and zap
//     like octosupd, and the static octosup-jail;
//   - reexec/…: the jail through this test binary re-executed as the
//     helper, as octosupd's own binary used to be;
//   - octosup-jail/…: the jail through the static helper (UseHelper);
//   - fork/…: the in-process spawn (production).
//
// It reports the p50 and p99 of each path (ms) and each p50's ratio to
// plain's; docs/jail.md has a run. Run it without -race:
//
//	go test -run '^$' -bench BenchmarkSpawn -benchtime 400x ./jail/
func BenchmarkSpawn(b *testing.B) {
	h := newHarness(b)
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	wait := func(pidfd int) {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil); err != nil {
			b.Fatal(err)
		}
		unix.Close(pidfd)
	}
	plain := func(argv ...string) func() {
		return func() {
			var pid, pidfd int
			var err error
			h.sp.do(func() {
				pidfd = -1
				pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
					Dir:   "/",
					Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd(), devnull.Fd()},
					Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
				})
			})
			if err != nil || pid <= 0 {
				b.Fatal(err)
			}
			wait(pidfd)
		}
	}
	jailed := func(cfg Config, processes bool) func() {
		l := NewLauncher(cfg)
		app := policy.App{
			ID:      "bench",
			Exec:    []string{"/bin/true"},
			Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &processes},
			Storage: policy.Storage{Jail: true},
		}
		return func() {
			var proc *Process
			var err error
			h.sp.do(func() {
				proc, err = l.Start(Request{App: app, Dirs: h.dirs, Stdout: devnull, Stderr: devnull, Hub: devnull})
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proc.Confirm(); err != nil {
				b.Fatal(err)
			}
			if proc.forked == cfg.UseHelper {
				b.Fatalf("spawned in-process %v with UseHelper %v", proc.forked, cfg.UseHelper)
			}
			wait(proc.Pidfd)
		}
	}
	reexec := Config{HelperPath: h.probe, UseHelper: true}
	tiny := Config{HelperPath: h.helper, UseHelper: true}
	paths := []struct {
		name  string
		spawn func()
		times []time.Duration
	}{
		{name: "plain", spawn: plain("/bin/true")},
		// Without its descriptors a helper gives up at once, after the
		// runtime started and the packages initialized.
		{name: "floor/reexec", spawn: plain(h.probe, HelperArg)},
		{name: "floor/octosup-jail", spawn: plain(h.helper, HelperArg)},
		{name: "reexec/processes=false", spawn: jailed(reexec, false)},
		{name: "reexec/processes=true", spawn: jailed(reexec, true)},
		{name: "octosup-jail/processes=false", spawn: jailed(tiny, false)},
		{name: "octosup-jail/processes=true", spawn: jailed(tiny, true)},
		{name: "fork/processes=false", spawn: jailed(Config{}, false)},
		{name: "fork/processes=true", spawn: jailed(Config{}, true)},
	}
	round := 0
	for b.Loop() {
		for k := range paths {
			p := &paths[(round+k)%len(paths)]
			t0 := time.Now()
			p.spawn()
			p.times = append(p.times, time.Since(t0))
		}
		round++
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	quantile := func(ts []time.Duration, q float64) time.Duration {
		s := slices.Clone(ts)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	base := quantile(paths[0].times, 0.5)
	var table strings.Builder
	fmt.Fprintf(&table, "%d rounds\n%-30s %8s %8s %7s\n", round, "path", "p50", "p99", "÷plain")
	for _, p := range paths {
		p50, p99 := quantile(p.times, 0.5), quantile(p.times, 0.99)
		unit := strings.NewReplacer("/", "_", "=", "_").Replace(p.name)
		b.ReportMetric(ms(p50), unit+"_p50_ms")
		b.ReportMetric(ms(p99), unit+"_p99_ms")
		fmt.Fprintf(&table, "%-30s %7.2fms %7.2fms %6.2f×\n", p.name, ms(p50), ms(p99), ms(p50)/ms(base))
	}
	b.Log("\n" + table.String())
}

// BenchmarkGuardFlood: a jail app that calls inotify_add_watch in a loop
// for 3 s makes the daemon work for it; the guard's budget (budget.go)
// holds that work to a share of one CPU. It reports the daemon's CPU per
// second of the flood and the app's own, and the calls answered per
// second. One iteration is one 3 s flood.
func BenchmarkGuardFlood(b *testing.B) {
	h := newHarness(b)
	app := h.probeApp("flood", "inotify_flood", h.dirs.JailDir("flood"), "3")
	for b.Loop() {
		var before, after unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &before)
		t0 := time.Now()
		o := h.runApp(app, nil, nil)
		wall := time.Since(t0)
		unix.Getrusage(unix.RUSAGE_SELF, &after)
		if o.err != nil {
			b.Fatal(o.err)
		}
		var calls, appMs int
		if _, err := fmt.Sscanf(o.out, "calls %d cpu_ms %d", &calls, &appMs); err != nil {
			b.Fatalf("probe said %q", o.out)
		}
		cpu := func(r unix.Rusage) time.Duration {
			return time.Duration(r.Utime.Nano()) + time.Duration(r.Stime.Nano())
		}
		daemon := cpu(after) - cpu(before)
		b.ReportMetric(daemon.Seconds()/wall.Seconds(), "daemon_cpu/s")
		b.ReportMetric(float64(appMs)/1000/wall.Seconds(), "app_cpu/s")
		b.ReportMetric(float64(calls)/wall.Seconds(), "calls/s")
	}
}

// BenchmarkConnect: what a connect to a granted socket costs through the
// guard (the filter stops the app, the daemon checks the address and
// connects the app's socket for it; desktop.go) against the same connect
// made by the same probe outside any jail, in one run, turn about. Each
// turn runs 2000 connects to a listener of the test's and reports the
// mean time of one connect call, as the app sees it.
func BenchmarkConnect(b *testing.B) {
	h := newHarness(b)
	sock := filepath.Join(h.dirs.Runtime, "listener.sock")
	acceptAll(b, sock)
	const n = "2000"
	app := h.probeApp("connect", "connect_loop", sock, n)
	app.Sandbox.Sockets = []string{"wayland"}
	env := []string{"XDG_RUNTIME_DIR=" + h.dirs.Runtime, "WAYLAND_DISPLAY=" + sock}
	var guarded, plain float64
	for b.Loop() {
		o := h.runApp(app, env, nil)
		if o.err != nil {
			b.Fatal(o.err)
		}
		g, err := strconv.ParseFloat(o.out, 64)
		if err != nil {
			b.Fatalf("jailed probe said %q", o.out)
		}
		out := h.runPlain("connect_loop", sock, n)
		p, err := strconv.ParseFloat(out, 64)
		if err != nil {
			b.Fatalf("plain probe said %q", out)
		}
		guarded, plain = guarded+g, plain+p
	}
	b.ReportMetric(guarded/float64(b.N), "guard_ns/connect")
	b.ReportMetric(plain/float64(b.N), "plain_ns/connect")
	b.ReportMetric(guarded/plain, "ratio")
}
