package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/internal/asnobody"
	"octosup/jail"
	"octosup/policy"
)

// The apps of the limits tests (child, main_test.go, sends these modes
// here).

// forkBomb forks /bin/sleep children as fast as it can. At the first
// refusal it prints "bomb held N errno" (N children made); then it goes
// on trying, as a fork bomb would, once a millisecond.
//
// Those later tries are raw forks whose child exits at once: the Go
// runtime may start a thread around a syscall it enters (ForkExec's), and
// at the limit that thread's creation fails and aborts the bomb (CI saw
// "pthread_create failed" a third of a second into the episode). A raw
// syscall starts none.
func forkBomb() int {
	children := 0
	for {
		_, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{})
		if err != nil {
			fmt.Printf("bomb held %d %s\n", children, errName(err))
			break
		}
		children++
	}
	for {
		if pid, _, _ := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0); pid == 0 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0) // the child: a slot freed, now given back
		}
		time.Sleep(time.Millisecond)
	}
}

func errName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == syscall.EAGAIN {
		return "EAGAIN"
	}
	return err.Error()
}

// spin burns CPU on one thread until killed.
func spin() int {
	fmt.Println("ready")
	for x := 0; ; x++ {
		_ = x * x
	}
}

// memoryHog allocates and touches memory 16 MiB at a time until it is
// killed, printing the total as it goes.
func memoryHog() int {
	var keep [][]byte
	for mb := 16; ; mb += 16 {
		b := make([]byte, 16<<20)
		for i := range b {
			if i%4096 == 0 {
				b[i] = 1
			}
		}
		keep = append(keep, b)
		fmt.Println("hog", mb, len(keep))
	}
}

func TestLimitWrites(t *testing.T) {
	type w struct{ file, value string }
	for _, c := range []struct {
		name  string
		lim   policy.ResourceLimits
		reset bool
		want  []w
	}{
		{"defaults at a start: the task limit only", policy.ResourceLimits{TasksMax: 512}, false,
			[]w{{"pids.max", "512"}}},
		{"an entry built by hand gets the default", policy.ResourceLimits{}, false,
			[]w{{"pids.max", "512"}}},
		{"every limit", policy.ResourceLimits{MemoryMax: 512 << 20, MemoryHigh: 400 << 20, TasksMax: 64, CPUWeight: 50, CPUMax: "10%", IOWeight: 300}, false,
			[]w{{"memory.max", "536870912"}, {"memory.high", "419430400"}, {"pids.max", "64"}, {"cpu.weight", "50"}, {"cpu.max", "10000 100000"}, {"io.weight", "default 300"}}},
		{"a reload writes the defaults back", policy.ResourceLimits{TasksMax: 512, CPUMax: "20000/50000"}, true,
			[]w{{"memory.max", "max"}, {"memory.high", "max"}, {"pids.max", "512"}, {"cpu.weight", "100"}, {"cpu.max", "20000 50000"}, {"io.weight", "default 100"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []w
			for _, x := range limitWrites(c.lim, c.reset) {
				got = append(got, w{x.file, x.value})
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("writes %v, want %v", got, c.want)
			}
		})
	}
}

// TestWriteLimits: what a leaf's controllers cannot hold is missing, but
// only when the entry asked for it; the rest is written and reported.
func TestWriteLimits(t *testing.T) {
	for _, c := range []struct {
		name    string
		lim     policy.ResourceLimits
		have    []string
		files   map[string]string
		applied []string
		missing []string
	}{
		{"no controllers, defaults only: nothing missing", policy.ResourceLimits{TasksMax: 512}, nil,
			map[string]string{}, []string{}, []string{}},
		{"pids and cpu, memory asked", policy.ResourceLimits{MemoryMax: 512 << 20, TasksMax: 64, CPUMax: "10%"}, []string{"pids", "cpu"},
			map[string]string{"pids.max": "64", "cpu.max": "10000 100000"}, []string{"tasks_max=64", "cpu_max=10%"}, []string{"limits.memory"}},
		{"every controller", policy.ResourceLimits{MemoryMax: 1 << 30, MemoryHigh: 768 << 20, TasksMax: 512, CPUWeight: 200, IOWeight: 50}, []string{"memory", "pids", "cpu", "io"},
			map[string]string{"memory.max": "1073741824", "memory.high": "805306368", "pids.max": "512", "cpu.weight": "200", "io.weight": "default 50"},
			[]string{"memory_max=1G", "memory_high=768M", "tasks_max=512", "cpu_weight=200", "io_weight=50"}, []string{}},
		{"a controller without its file", policy.ResourceLimits{TasksMax: 512, IOWeight: 50}, []string{"pids", "io"},
			map[string]string{"pids.max": "512"}, []string{"tasks_max=512"}, []string{"limits.io"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"memory.max", "memory.high", "pids.max", "cpu.weight", "cpu.max"} {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if c.name != "a controller without its file" {
				os.WriteFile(filepath.Join(dir, "io.weight"), nil, 0o600)
			}
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			have := map[string]bool{}
			for _, h := range c.have {
				have[h] = true
			}
			rep, _ := writeLimits(fd, c.lim, have, false)
			if !reflect.DeepEqual(rep.Applied, c.applied) || !reflect.DeepEqual(rep.Missing, c.missing) {
				t.Errorf("applied %q missing %q, want %q %q", rep.Applied, rep.Missing, c.applied, c.missing)
			}
			for f, want := range c.files {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != want {
					t.Errorf("%s holds %q, want %q", f, b, want)
				}
			}
			for _, f := range []string{"memory.max", "memory.high", "pids.max", "cpu.weight", "cpu.max", "io.weight"} {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); len(b) > 0 && c.files[f] == "" {
					t.Errorf("%s was written (%q) though nothing asked", f, b)
				}
			}
		})
	}
}

func TestSystemTasks(t *testing.T) {
	for _, c := range []struct {
		file string
		want int
		err  bool
	}{{"loadavg", 312, false}, {"loadavg-bad", 0, true}, {"loadavg-none", 0, true}} {
		n, err := systemTasks(filepath.Join("testdata", c.file))
		if n != c.want || (err != nil) != c.err {
			t.Errorf("%s: %d, %v; want %d (error %v)", c.file, n, err, c.want, c.err)
		}
	}
}

// TestStrictRefusesMissingLimits: a strict app whose entry asks for a
// weight nothing can enforce does not start, and says which and why; a
// best-effort one starts and reports it missing.
func TestStrictRefusesMissingLimits(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(cfg *testConfig) { cfg.noCgroup = true; cfg.Strictness = jail.Strict })
	strict := testApp(exe, "strict", "sleep", false)
	strict.Limits = policy.ResourceLimits{CPUWeight: 50, TasksMax: 512}
	lax := strict
	lax.ID = "lax"
	lax.Sandbox.Strictness = string(jail.BestEffort)
	apply(t, sup, strict, lax)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Start(ctx, "strict")
	want := "limits: limits.cpu missing and the app is strict: the supervisor was made without cgroups"
	if !errors.Is(err, ErrStartFailed) || st.State != Failed || st.Reason != want {
		t.Fatalf("strict start: %v, state %s reason %q; want failed with %q", err, st.State, st.Reason, want)
	}
	st, err = sup.Start(ctx, "lax")
	wantMissing := []string{"limits.cpu"}
	if os.Geteuid() == 0 {
		wantMissing = append(wantMissing, "limits.pids") // RLIMIT_NPROC does not hold root
	}
	if err != nil || st.Limits == nil || !reflect.DeepEqual(st.Limits.Missing, wantMissing) {
		t.Fatalf("best-effort start: %v, limits %+v; want it running with limits.cpu missing", err, st.Limits)
	}
}

// TestUnheldLimitsRefused: a bound the entry sets (memory_max, and
// tasks_max for a root daemon, whose apps RLIMIT_NPROC does not hold) that
// nothing can hold refuses the start with the reason and the fix, even
// best-effort; an unprivileged daemon holds tasks_max with RLIMIT_NPROC
// and starts the app.
func TestUnheldLimitsRefused(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(cfg *testConfig) { cfg.noCgroup = true })
	hog := testApp(exe, "hog", "sleep", false)
	hog.Limits = policy.ResourceLimits{MemoryMax: 64 << 20, TasksMax: 512}
	bomb := testApp(exe, "bomb", "sleep", false)
	bomb.Limits = policy.ResourceLimits{TasksMax: 64}
	apply(t, sup, hog, bomb)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Start(ctx, "hog")
	want := "limits: memory_max 64M cannot be held here (the supervisor was made without cgroups): remove it from the entry to run the app without it, or run octosupd where its cgroup has the controller (docs/limits.md)"
	if !errors.Is(err, ErrStartFailed) || st.State != Failed || st.Reason != want {
		t.Fatalf("memory_max: %v, state %s reason %q; want failed with %q", err, st.State, st.Reason, want)
	}
	st, err = sup.Start(ctx, "bomb")
	if os.Geteuid() == 0 {
		want := "limits: tasks_max 64 cannot be held here (the supervisor was made without cgroups; RLIMIT_NPROC does not hold a root daemon's apps): remove it from the entry to run the app without it, or run octosupd where its cgroup has the controller (docs/limits.md)"
		if !errors.Is(err, ErrStartFailed) || st.State != Failed || st.Reason != want {
			t.Fatalf("tasks_max as root: %v, state %s reason %q; want failed with %q", err, st.State, st.Reason, want)
		}
		return
	}
	if err != nil || st.Limits == nil || !nprocApplied(st.Limits.Applied, 64) {
		t.Fatalf("tasks_max unprivileged: %v, limits %+v; want it held by RLIMIT_NPROC", err, st.Limits)
	}
}

// TestNprocFallback: without a cgroup the default tasks_max still holds
// the app, through RLIMIT_NPROC set soft and hard on its process; for a
// root daemon, whose apps the kernel exempts from it, the report says the
// limit is missing instead of applied.
func TestNprocFallback(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(cfg *testConfig) { cfg.noCgroup = true })
	app := testApp(exe, "one", "sleep", false)
	if os.Geteuid() != 0 {
		app.Limits.TasksMax = 64 // as root, one set is refused (TestUnheldLimitsRefused)
	}
	apply(t, sup, app)
	before, err := systemTasks("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Start(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := systemTasks("/proc/loadavg")
	if os.Geteuid() == 0 {
		if st.Limits == nil || len(st.Limits.Applied) != 0 || !reflect.DeepEqual(st.Limits.Missing, []string{"limits.pids"}) {
			t.Fatalf("limits %+v; want the default tasks_max missing, nothing applied: RLIMIT_NPROC does not hold root", st.Limits)
		}
		return
	}
	if st.Limits == nil || st.Limits.Limiter != LimiterPrlimit || !nprocApplied(st.Limits.Applied, 64) {
		t.Fatalf("limits %+v; want tasks_max=64 through RLIMIT_NPROC", st.Limits)
	}
	var lim unix.Rlimit
	if err := unix.Prlimit(st.Pid, unix.RLIMIT_NPROC, nil, &lim); err != nil {
		t.Fatal(err)
	}
	lo, hi := uint64(min(before, after)+64-50), uint64(max(before, after)+64+50)
	if lim.Cur != lim.Max || lim.Cur < lo || lim.Cur > hi {
		t.Fatalf("RLIMIT_NPROC %d/%d; want soft = hard, the system's tasks (%d..%d) + 64", lim.Cur, lim.Max, before, after)
	}
}

// requireCgroup is set where the cgroup path must be tested (CI's run
// under user-mode Linux, .ci/uml-cgroup): a missing controller fails
// the test instead of skipping it.
const requireCgroup = "OCTOSUP_REQUIRE_CGROUP"

// skipUnlessRequired is t.Skipf, or t.Fatalf with requireCgroup=1.
func skipUnlessRequired(t *testing.T) func(format string, args ...any) {
	if os.Getenv(requireCgroup) == "1" {
		return func(format string, args ...any) {
			t.Helper()
			t.Fatalf(requireCgroup+"=1: "+format, args...)
		}
	}
	return func(format string, args ...any) {
		t.Helper()
		t.Skipf(format, args...)
	}
}

// limitsOrSkip skips a test that needs the leaves to have the given
// controllers, saying which the machine lacks and why.
func limitsOrSkip(t *testing.T, sup *Supervisor, ctls ...string) {
	t.Helper()
	skip := skipUnlessRequired(t)
	if sup.cgroups == nil {
		skip("no cgroup leaves: %s", sup.noCgroup)
	}
	var lack []string
	for _, c := range ctls {
		if !sup.cgroups.controllers[c] {
			lack = append(lack, c)
		}
	}
	if len(lack) > 0 {
		skip("the leaves lack the %s controller (%s); on a hybrid machine the cgroup v1 hierarchy holds it until it is released (docs/limits.md, \"Testing\")",
			strings.Join(lack, ", "), sup.cgroups.lacking)
	}
}

// TestTasksMaxHoldsForkBomb: a fork bomb is held at its tasks_max by the
// pids controller, says so once (a warning event), and its neighbour and
// status go on answering.
func TestTasksMaxHoldsForkBomb(t *testing.T) {
	cgroupOrSkip(t)
	exe := testExe(t)
	sup := startSup(t, nil)
	limitsOrSkip(t, sup, "pids")
	sub := sup.Subscribe(4096)
	defer sub.Close()
	bomb := testApp(exe, "bomb", "forkbomb", true)
	bomb.Limits.TasksMax = 64
	apply(t, sup, testApp(exe, "neighbour", "sleep", true), bomb)
	// The warning may come before or after the bomb's line: count them
	// from the start until the episode has had time to end and not begin
	// again (the bomb goes on forking).
	warnings := 0
	var line string
	var quiet <-chan time.Time
	timeout := time.After(waitFor)
	for wait := true; wait; {
		select {
		case ev := <-sub.Events():
			switch {
			case ev.Kind == KindWarning && ev.State.ID == "bomb":
				warnings++
				if want := "tasks_max reached (64): the app's forks and new threads fail"; ev.Warning != want {
					t.Errorf("warning %q, want %q", ev.Warning, want)
				}
			case ev.Kind == KindLog && ev.Log.App == "bomb" && strings.HasPrefix(ev.Log.Text, "bomb held "):
				line = ev.Log.Text
				quiet = time.After(3 * episodeQuiet / 2)
			}
		case <-quiet:
			wait = false
		case <-timeout:
			t.Fatalf("the bomb said nothing within %s", waitFor)
		}
	}
	if !strings.HasSuffix(line, " EAGAIN") {
		t.Fatalf("the bomb's forks failed otherwise: %q", line)
	}
	st := status(t, sup, "bomb")
	if u := usage(t, sup, "bomb"); u == nil || u.Tasks != 64 {
		t.Fatalf("usage %+v; want 64 tasks, the limit", u)
	}
	if st.Limits == nil || st.Limits.Limiter != LimiterCgroup {
		t.Fatalf("limits %+v; want the cgroup's", st.Limits)
	}
	if warnings != 1 {
		t.Errorf("%d tasks_max warnings while the bomb went on, want 1 (once per episode)", warnings)
	}
	if n := status(t, sup, "neighbour"); n.State != Running {
		t.Fatalf("neighbour %s", n.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sup.Stop(ctx, "bomb"); err != nil {
		t.Fatal(err)
	}
}

// TestOOMKilledReason: a memory hog is OOM-killed at memory_max and
// stops with that reason; its neighbour runs on.
func TestOOMKilledReason(t *testing.T) {
	cgroupOrSkip(t)
	exe := testExe(t)
	sup := startSup(t, nil)
	limitsOrSkip(t, sup, "memory")
	sub := sup.Subscribe(4096)
	defer sub.Close()
	hog := testApp(exe, "hog", "hog", true)
	hog.Limits.MemoryMax = 64 << 20
	apply(t, sup, testApp(exe, "neighbour", "sleep", true), hog)
	st := waitState(t, sub, "hog", inState(Stopped))
	if want := "oom-killed (memory_max 64M)"; st.Reason != want || st.LastExit == nil || st.LastExit.Clean() {
		t.Fatalf("hog stopped with reason %q, exit %v; want %q", st.Reason, st.LastExit, want)
	}
	if n := status(t, sup, "neighbour"); n.State != Running {
		t.Fatalf("neighbour %s", n.State)
	}
}

// TestCPUMax: an app held to cpu_max 10% and spinning gets about a tenth
// of a CPU over 3 s, by its own cpu.stat.
func TestCPUMax(t *testing.T) {
	cgroupOrSkip(t)
	exe := testExe(t)
	sup := startSup(t, nil)
	limitsOrSkip(t, sup, "cpu")
	sub := sup.Subscribe(4096)
	defer sub.Close()
	app := testApp(exe, "spin", "spin", true)
	app.Limits.CPUMax = "10%"
	apply(t, sup, app)
	waitLog(t, sub, "spin", "ready")
	a := usage(t, sup, "spin")
	time.Sleep(3 * time.Second) // the measurement's window itself
	b := usage(t, sup, "spin")
	share := float64(b.CPUUsec-a.CPUUsec) / float64(b.At.Sub(a.At).Microseconds())
	// cpu.max is enforced per 100 ms period: over 30 periods the share
	// stays within a period's rounding of 10%.
	if share < 0.07 || share > 0.13 {
		t.Fatalf("the spinning app got %.1f%% of a CPU, want 10%% ± 3", share*100)
	}
	t.Logf("cpu_max 10%%: the spinning app got %.1f%% of a CPU over %s", share*100, b.At.Sub(a.At).Round(time.Millisecond))
}

// usage is Supervisor.Usage of the app id.
func usage(t testing.TB, sup *Supervisor, id string) *Usage {
	t.Helper()
	u, err := sup.Usage(id)
	if err != nil {
		t.Fatalf("Usage(%s): %v", id, err)
	}
	return u
}

// TestUsageFromTheLeaf: Usage reads a running app's usage from its leaf
// (without the memory controller, the resident sets of its processes).
func TestUsageFromTheLeaf(t *testing.T) {
	cgroupOrSkip(t)
	exe := testExe(t)
	sup := startSup(t, nil)
	sub := sup.Subscribe(4096)
	defer sub.Close()
	apply(t, sup, testApp(exe, "tree", "grandchild", true))
	waitLog(t, sub, "tree", "grandchild ")
	u := usage(t, sup, "tree")
	if u == nil {
		t.Fatal("no usage for a running app in a leaf")
	}
	if u.Tasks < 2 || u.CPUUsec == 0 || u.At.IsZero() || (u.MemoryCurrent == 0 && u.MemoryRSS == 0) {
		t.Fatalf("usage %+v; want two processes' tasks, some CPU and memory", u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sup.Stop(ctx, "tree"); err != nil {
		t.Fatal(err)
	}
	if u := usage(t, sup, "tree"); u != nil {
		t.Fatalf("a stopped app has usage %+v", u)
	}
}

// TestForkBombAsNobody re-runs the fork-bomb tests as an unprivileged
// user, where RLIMIT_NPROC, the fallback without the pids controller,
// holds (the kernel exempts root).
func TestForkBombAsNobody(t *testing.T) {
	out := asnobody.RunIn(t, asnobody.NewDir(t), "^TestNprocHoldsForkBomb$")
	asnobody.WantPassed(t, out, "TestNprocHoldsForkBomb")
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "held at") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// TestNprocHoldsForkBomb: without a cgroup, a fork bomb run by an
// unprivileged user is held by RLIMIT_NPROC near its tasks_max (above it
// by the tasks the system ran at its start), and the supervisor goes on
// serving its neighbour.
func TestNprocHoldsForkBomb(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root is exempt from RLIMIT_NPROC: TestForkBombAsNobody runs this as nobody")
	}
	exe := testExe(t)
	sup := startSup(t, func(cfg *testConfig) { cfg.noCgroup = true })
	sub := sup.Subscribe(4096)
	defer sub.Close()
	bomb := testApp(exe, "bomb", "forkbomb", false)
	bomb.Limits.TasksMax = 64
	apply(t, sup, testApp(exe, "neighbour", "sleep", true), bomb)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Start(ctx, "bomb")
	if err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Prlimit(st.Pid, unix.RLIMIT_NPROC, nil, &lim); err != nil {
		t.Fatal(err)
	}
	line := waitLog(t, sub, "bomb", "bomb held ")
	f := strings.Fields(line)
	n, _ := strconv.Atoi(f[2])
	if f[3] != "EAGAIN" || uint64(n) > lim.Cur {
		t.Fatalf("%q with RLIMIT_NPROC %d; want EAGAIN within the limit", line, lim.Cur)
	}
	t.Logf("fork bomb held at %d children by RLIMIT_NPROC %d (tasks_max 64)", n, lim.Cur)
	if nb := status(t, sup, "neighbour"); nb.State != Running {
		t.Fatalf("neighbour %s", nb.State)
	}
	if _, err := sup.Restart(ctx, "neighbour"); err != nil {
		t.Fatalf("restart the neighbour during the bomb: %v", err)
	}
	if _, err := sup.Stop(ctx, "bomb"); err != nil {
		t.Fatal(err)
	}
}

// TestReloadLimitsInPlace: a reload that changes only an app's limits
// applies them to its running process, the same pid, without a restart:
// the cgroup's files where the leaf has the controller, RLIMIT_NPROC
// where it stands in.
func TestReloadLimitsInPlace(t *testing.T) {
	for _, c := range []struct {
		name     string
		noCgroup bool
	}{{"rlimit", true}, {"cgroup", false}} {
		t.Run(c.name, func(t *testing.T) {
			if !c.noCgroup {
				cgroupOrSkip(t)
			}
			exe := testExe(t)
			sup := startSup(t, func(cfg *testConfig) { cfg.noCgroup = c.noCgroup })
			if !c.noCgroup {
				limitsOrSkip(t, sup, "memory", "pids")
			}
			app := testApp(exe, "one", "sleep", true)
			app.Limits = policy.ResourceLimits{TasksMax: 64, MemoryMax: 256 << 20}
			next := policy.ResourceLimits{TasksMax: 32, MemoryMax: 128 << 20}
			root := c.noCgroup && os.Geteuid() == 0
			switch {
			case root:
				// A root daemon holds no bound without a cgroup (those
				// are refused: TestUnheldLimitsRefused); a weight
				// changes, and the report must not claim RLIMIT_NPROC.
				app.Limits, next = policy.ResourceLimits{CPUWeight: 50}, policy.ResourceLimits{CPUWeight: 60}
			case c.noCgroup:
				// No memory controller: a memory_max would be refused.
				app.Limits.MemoryMax, next.MemoryMax = 0, 0
			}
			apply(t, sup, app)
			before := status(t, sup, "one")
			app.Limits = next
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			done, err := sup.Apply(ctx, &policy.Manifest{Version: 1, Apps: []policy.App{app}}, ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(done.Limits, []string{"one"}) || len(done.Restarted) > 0 {
				t.Fatalf("the reload says limits %v, restarted %+v; want one's limits applied in place, no restart", done.Limits, done.Restarted)
			}
			after := status(t, sup, "one")
			if after.Pid != before.Pid || after.Restarts != 0 || after.State != Running {
				t.Fatalf("after the reload: pid %d (was %d), %d restarts, %s; want the same process running", after.Pid, before.Pid, after.Restarts, after.State)
			}
			if root {
				if slices.ContainsFunc(after.Limits.Applied, func(a string) bool { return strings.Contains(a, "RLIMIT_NPROC") }) ||
					!slices.Contains(after.Limits.Missing, "limits.pids") {
					t.Fatalf("limits %+v after the reload; want limits.pids missing and no RLIMIT_NPROC claimed: it does not hold root", after.Limits)
				}
				return
			}
			if c.noCgroup {
				var lim unix.Rlimit
				if err := unix.Prlimit(after.Pid, unix.RLIMIT_NPROC, nil, &lim); err != nil {
					t.Fatal(err)
				}
				total, _ := systemTasks("/proc/loadavg")
				if lim.Max > uint64(total+32+50) || !nprocApplied(after.Limits.Applied, 32) {
					t.Fatalf("RLIMIT_NPROC %d (the system runs %d), limits %+v; want tasks_max 32 in place", lim.Max, total, after.Limits)
				}
				return
			}
			leaf := sup.apps["one"].leafPath
			for file, want := range map[string]string{"memory.max": "134217728", "pids.max": "32"} {
				if b, _ := os.ReadFile(filepath.Join(leaf, file)); strings.TrimSpace(string(b)) != want {
					t.Errorf("%s holds %q, want %s", file, b, want)
				}
			}
		})
	}
}

// BenchmarkLeafLimits is what the limits add to a start: a leaf made and
// removed alone, the same leaf with every limit written into it (where
// the leaves have the controllers: elsewhere nothing is written), and
// the RLIMIT_NPROC fallback on a child.
func BenchmarkLeafLimits(b *testing.B) {
	own, err := ownCgroup("/proc/self/mountinfo", "/proc/self/cgroup")
	if err == nil {
		err = unix.Access(own, unix.W_OK)
	}
	if err != nil {
		b.Skipf("no writable cgroup v2: %v", err)
	}
	sup := startSup(b, nil)
	if sup.cgroups == nil {
		b.Skip(sup.noCgroup)
	}
	every := policy.ResourceLimits{MemoryMax: 512 << 20, MemoryHigh: 400 << 20, TasksMax: 64, CPUWeight: 50, CPUMax: "10%", IOWeight: 300}
	for _, c := range []struct {
		name string
		lim  *policy.ResourceLimits
	}{{"leaf", nil}, {"leaf+default", &policy.ResourceLimits{TasksMax: policy.DefaultTasksMax}}, {"leaf+every", &every}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				path, dir, err := sup.cgroups.leaf("bench")
				if err != nil {
					b.Fatal(err)
				}
				if c.lim != nil {
					// ENOENT: a controller without the file (io.weight
					// without blk-iocost), which the start reports missing.
					if _, err := writeLimits(int(dir.Fd()), *c.lim, sup.cgroups.controllers, false); err != nil && !errors.Is(err, unix.ENOENT) {
						b.Fatal(err)
					}
				}
				dir.Close()
				if err := unix.Rmdir(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("rlimit", func(b *testing.B) {
		cmd := exec.Command("/bin/sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		for b.Loop() {
			// EPERM: the system runs more tasks than at the last call, and
			// raising a hard limit takes CAP_SYS_RESOURCE; the call cost
			// the same.
			if _, err := limitNproc(cmd.Process.Pid, 64); err != nil && !errors.Is(err, unix.EPERM) {
				b.Fatal(err)
			}
		}
	})
}

// TestInAppsDaemonLeaf: the daemon's own leaf, which it moves into to
// enable the controllers, is not an app's: the peer check places a
// process there by its ancestors, as one in the daemon's cgroup.
func TestInAppsDaemonLeaf(t *testing.T) {
	pl := placer{own: "/svc", subtree: "octosup.7.9"}
	for _, c := range []struct {
		cg       string
		in, ours bool
		leaf     string
	}{
		{"/svc/octosup.7.9/notes.123", true, true, "notes.123"},
		{"/svc/octosup.7.9/daemon", false, false, ""},
		{"/svc/octosup.8.1/daemon", false, false, ""},
		{"/svc/octosup.8.1/notes.5", true, false, "notes.5"},
		{"/svc/octosup.7.9/daemon.abc", true, true, "daemon.abc"},
		{"/svc", false, false, ""},
	} {
		in, ours, leaf := pl.inApps(c.cg)
		if in != c.in || ours != c.ours || leaf != c.leaf {
			t.Errorf("inApps(%s) = %v %v %q, want %v %v %q", c.cg, in, ours, leaf, c.in, c.ours, c.leaf)
		}
	}
}

// nprocApplied reports whether applied is tasks_max n held by
// RLIMIT_NPROC alone, saying the number it set and what it bounds.
func nprocApplied(applied []string, n int) bool {
	return len(applied) == 1 && regexp.MustCompile(`^tasks_max=`+strconv.Itoa(n)+` \(RLIMIT_NPROC \d+: every task of the user\)$`).MatchString(applied[0])
}
