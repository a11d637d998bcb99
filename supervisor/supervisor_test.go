package supervisor

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"octosup/jail"
	"octosup/policy"
)

// waitFor bounds every wait on an event in these tests.
const waitFor = 15 * time.Second

func testExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// startSup runs a Supervisor until the test ends; cleanup waits for Run
// to return, so no app outlives the test.
func startSup(t testing.TB, edit func(*testConfig)) *Supervisor {
	t.Helper()
	return startSupLaunch(t, edit, nil)
}

// testConfig is what startSup's edit may change: the Config, and whether
// the supervisor goes without cgroups (its apps stopped through their
// process groups, as where the daemon may not create any).
type testConfig struct {
	Config
	noCgroup bool
}

// startSupLaunch is startSup with the launch wrapped by wrap (when not
// nil): the tests' stand-in for launchers that misbehave.
func startSupLaunch(t testing.TB, edit func(*testConfig), wrap func(launchFunc) launchFunc) *Supervisor {
	t.Helper()
	cfg := testConfig{Config: Config{
		Launcher:  jail.NewLauncher(jail.Config{}),
		Log:       zaptest.NewLogger(t),
		Dirs:      policy.Dirs{Data: t.TempDir()},
		BaseEnv:   os.Environ(),
		StopGrace: 2 * time.Second,
	}}
	if edit != nil {
		edit(&cfg)
	}
	events := withEvents(&cfg.Config)
	sup, err := newSupervisor(cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.noCgroup {
		sup.openCgroups()
	}
	started(t, sup, events)
	if wrap != nil {
		sup.launch = wrap(sup.launch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return sup
}

func apply(t testing.TB, sup *Supervisor, apps ...policy.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sup.Apply(ctx, &policy.Manifest{Version: 1, Apps: apps}, ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func status(t testing.TB, sup *Supervisor, id string) AppStatus {
	t.Helper()
	st, err := sup.Status(id)
	if err != nil {
		t.Fatalf("Status(%s): %v", id, err)
	}
	return st[0]
}

// waitState reads sub until a state event of app id satisfies ok.
func waitState(t testing.TB, sub *Subscription, id string, ok func(AppStatus) bool) AppStatus {
	t.Helper()
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for {
		select {
		case ev, open := <-sub.Events():
			if !open {
				t.Fatalf("subscription ended while waiting for %s: %v", id, sub.Err())
			}
			if ev.Kind == KindState && ev.State.ID == id && ok(*ev.State) {
				return *ev.State
			}
		case <-timeout.C:
			t.Fatalf("no matching state event of %s within %s", id, waitFor)
		}
	}
}

func inState(s State) func(AppStatus) bool { return func(st AppStatus) bool { return st.State == s } }

// waitLog reads sub until app id prints a line starting with prefix.
// waitPid reads sub until app id prints "word <pid>", and returns the
// pid.
func waitPid(t testing.TB, sub *Subscription, id, word string) int {
	t.Helper()
	line := waitLog(t, sub, id, word+" ")
	pid, err := strconv.Atoi(strings.TrimPrefix(line, word+" "))
	if err != nil {
		t.Fatalf("bad line %q", line)
	}
	return pid
}

func waitLog(t testing.TB, sub *Subscription, id, prefix string) string {
	t.Helper()
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for {
		select {
		case ev, open := <-sub.Events():
			if !open {
				t.Fatalf("subscription ended while waiting for output of %s: %v", id, sub.Err())
			}
			if ev.Kind == KindLog && ev.Log.App == id && strings.HasPrefix(ev.Log.Text, prefix) {
				return ev.Log.Text
			}
		case <-timeout.C:
			t.Fatalf("%s printed no line starting %q within %s", id, prefix, waitFor)
		}
	}
}

// pidfd opens a pidfd of a process that is not the test's child, to wait
// for its death (a zombie counts: no init reaps in every container).
func pidfd(t testing.TB, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v (is the process already gone?)", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// awaitGone waits, bounded, for the process behind fd to exit.
func awaitGone(t testing.TB, fd int, what string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s is still alive after %s", what, waitFor)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left/time.Millisecond)+1)
		if err == nil && n > 0 {
			return
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("poll pidfd of %s: %v", what, err)
		}
	}
}

func TestSpawnCrashRestart(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, nil)
	sub := sup.Subscribe(1024)
	defer sub.Close()
	apply(t, sup, testApp(exe, "crashy", "sleep", true))

	st := status(t, sup, "crashy")
	if st.State != Running || st.Pid <= 0 || st.Restarts != 0 || st.Stopper != sup.stopper() || st.Jail == nil {
		t.Fatalf("after autostart: %+v", st)
	}
	appFD := pidfd(t, st.Pid)
	wantInside(t, sup.CheckCaller(Caller{Pid: st.Pid, Pidfd: appFD}), "crashy", "")
	if err := checkPid(t, sup, os.Getpid()); err != nil {
		t.Errorf("CheckCaller(test process) = %v, want nil", err)
	}

	if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crashed := waitState(t, sub, "crashy", inState(Stopped))
	if e := crashed.LastExit; e == nil || e.Kind != ExitSignal || e.Signal != "SIGKILL" || e.SignalNumber != int(unix.SIGKILL) ||
		e.Code != -1 || e.Clean() || crashed.Pid != 0 || e.At.IsZero() {
		t.Fatalf("after SIGKILL: %+v (last exit %+v)", crashed, crashed.LastExit)
	}
	if st := status(t, sup, "crashy"); st.State != Stopped {
		t.Fatalf("on-request app did not stay stopped: %+v", st)
	}
	// Reaped, it is refused by its pidfd, whatever has its pid now.
	wantUnplaced(t, sup.CheckCaller(Caller{Pid: st.Pid, Pidfd: appFD}), "exited")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	again, err := sup.Restart(ctx, "crashy")
	if err != nil {
		t.Fatal(err)
	}
	if again.State != Running || again.Pid == st.Pid || again.Pid <= 0 || again.Restarts != 1 {
		t.Fatalf("after restart: %+v (old pid %d)", again, st.Pid)
	}
	// Start of a running app leaves it alone.
	same, err := sup.Start(ctx, "crashy")
	if err != nil || same.Pid != again.Pid {
		t.Fatalf("Start of a running app: %+v, %v", same, err)
	}
}

func TestStop(t *testing.T) {
	exe := testExe(t)
	for _, tc := range []struct {
		mode       string
		grace      time.Duration
		wantSignal string
	}{
		// Go's default SIGTERM action ends it; the grace is far longer
		// than the test waits, so only SIGTERM can.
		{"sleep", 10 * time.Minute, "SIGTERM"},
		{"ignoreterm", 300 * time.Millisecond, "SIGKILL"}, // killed after the grace period
	} {
		t.Run(tc.mode, func(t *testing.T) {
			sup := startSup(t, func(c *testConfig) { c.StopGrace = tc.grace })
			sub := sup.Subscribe(1024)
			defer sub.Close()
			apply(t, sup, testApp(exe, "app", tc.mode, true))
			waitLog(t, sub, "app", "ready") // its SIGTERM handling is in place
			pid := status(t, sup, "app").Pid

			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			st, err := sup.Stop(ctx, "app")
			if err != nil {
				t.Fatal(err)
			}
			if st.State != Stopped || st.LastExit == nil || st.LastExit.Signal != tc.wantSignal {
				t.Fatalf("stopped: %+v, last exit %+v; want signal %s", st, st.LastExit, tc.wantSignal)
			}
			waitState(t, sub, "app", inState(Stopping))
			waitState(t, sub, "app", inState(Stopped))
			if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
				t.Errorf("kill(%d, 0) after stop = %v, want ESRCH (reaped)", pid, err)
			}
			// Stopping a stopped app is a no-op.
			if st, err := sup.Stop(ctx, "app"); err != nil || st.State != Stopped {
				t.Fatalf("second stop: %+v, %v", st, err)
			}
		})
	}
}

func TestStopKillsGrandchild(t *testing.T) {
	exe := testExe(t)
	// The grandchild ignores SIGTERM: the stop's SIGKILL at the end of
	// the grace ends it, though its leader died of the SIGTERM at once.
	sup := startSup(t, func(c *testConfig) { c.StopGrace = 300 * time.Millisecond })
	sub := sup.Subscribe(1024)
	defer sub.Close()
	apply(t, sup, testApp(exe, "tree", "grandchild", true))
	// The app prints this only once the grandchild ignores SIGTERM.
	gpid := waitPid(t, sub, "tree", "grandchild")
	gfd := pidfd(t, gpid)
	wantInside(t, sup.CheckCaller(Caller{Pid: gpid, Pidfd: gfd}), "tree", "")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Stop(ctx, "tree")
	if err != nil {
		t.Fatal(err)
	}
	// The leader dies of SIGTERM at once; the grandchild ignores SIGTERM
	// and dies of the SIGKILL at the end of the grace.
	if st.LastExit == nil || st.LastExit.Signal != "SIGTERM" {
		t.Fatalf("stopped: %+v, last exit %+v", st, st.LastExit)
	}
	awaitGone(t, gfd, "grandchild")
}

func TestOnFailureStartLimit(t *testing.T) {
	exe := testExe(t)
	// A clock that stands still: every start falls in one window and every
	// process ran for 0s, whatever the load of the machine.
	frozen := time.Unix(1_000_000, 0)
	sup := startSup(t, func(c *testConfig) { c.Now = func() time.Time { return frozen } })
	sub := sup.Subscribe(4096)
	defer sub.Close()
	a := testApp(exe, "loop", "exit3", true)
	a.Restart = policy.RestartOnFailure
	apply(t, sup, a)

	var delays []string
	failed := waitState(t, sub, "loop", func(st AppStatus) bool {
		if st.State == Stopped && strings.Contains(st.Reason, "restarting in") {
			delays = append(delays, st.Reason)
		}
		return st.State == Failed
	})
	if !strings.Contains(failed.Reason, "start limit hit") || failed.LastExit == nil || failed.LastExit.Code != 3 {
		t.Fatalf("failed: %+v, last exit %+v", failed, failed.LastExit)
	}
	if failed.Restarts != startBurst-1 || len(delays) != startBurst-1 {
		t.Fatalf("restarts %d, delays %q; want %d of each", failed.Restarts, delays, startBurst-1)
	}
	for i, want := range []string{"100ms", "200ms", "400ms", "800ms"} {
		if !strings.Contains(delays[i], "restarting in "+want) {
			t.Errorf("delay %d: %q, want %s", i, delays[i], want)
		}
	}
	logs, err := sup.Logs("loop", 0)
	if err != nil || len(logs) != startBurst {
		t.Errorf("logs of %d starts: %d lines, %v", startBurst, len(logs), err)
	}
	for _, l := range logs {
		if l.Stream != "stderr" || l.Text != "exiting with 3" {
			t.Errorf("log line %+v, want stderr \"exiting with 3\"", l)
		}
	}
	// A start by hand is allowed again (and fails the same way, later).
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if st, err := sup.Start(ctx, "loop"); err != nil || st.State != Running {
		t.Fatalf("start after failed: %+v, %v", st, err)
	}
	if st, err := sup.Stop(ctx, "loop"); err != nil || (st.State != Stopped && st.State != Failed) {
		t.Fatalf("stop: %+v, %v", st, err)
	}
}

func TestStartFailure(t *testing.T) {
	sup := startSup(t, nil)
	a := testApp("/nonexistent/octosup-test-app", "ghost", "sleep", false)
	apply(t, sup, a)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Start(ctx, "ghost")
	if !errors.Is(err, ErrStartFailed) || !errors.Is(err, jail.ErrNoProgram) || st.State != Failed ||
		!strings.Contains(st.Reason, "/nonexistent/octosup-test-app") || strings.HasPrefix(st.Reason, "start ") {
		t.Fatalf("start of a missing program: %+v, %v", st, err)
	}
	if strings.Count(err.Error(), "start ghost:") != 1 {
		t.Errorf("error repeats its context: %v", err)
	}
	if _, err := sup.Start(ctx, "nope"); !errors.Is(err, ErrUnknownApp) {
		t.Fatalf("start of an unknown app: %v", err)
	}
	if _, err := sup.Status("nope"); !errors.Is(err, ErrUnknownApp) {
		t.Fatalf("status of an unknown app: %v", err)
	}
}

// fakeLinks records hubs and detaches.
type fakeLinks struct {
	mu       sync.Mutex
	attached chan *os.File
	events   []string
}

func (f *fakeLinks) Attach(app policy.App, hub *os.File) {
	f.mu.Lock()
	f.events = append(f.events, "attach "+app.ID)
	f.mu.Unlock()
	f.attached <- hub
}

func (f *fakeLinks) Detach(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "detach "+id)
}

func TestEnvironmentAndDescriptors(t *testing.T) {
	links := &fakeLinks{attached: make(chan *os.File, 1)}
	secrets := []string{"OCTOS_AUTH_TOKEN=tok", "OCTOSENSE_VAULT=/vault", "OCTOSUP_X=x",
		"NOTIFY_SOCKET=/run/notify", "WATCHDOG_USEC=100", "LISTEN_FDS=1"}
	sup := startSup(t, func(c *testConfig) {
		c.Links = links
		c.BaseEnv = append(os.Environ(), secrets...)
	})
	sub := sup.Subscribe(4096)
	defer sub.Close()
	// A shell, not the test binary: the Go runtime opens descriptors of
	// its own (epoll) before any test code could look.
	a := testApp("/bin/sh", "envy", "", true)
	a.Exec = []string{"/bin/sh", "-c", `ls -l /proc/$$/fd; env | sed 's/^/env /'; echo "hello hub" >&3`}
	a.Env["LANG"] = "C.UTF-8"
	apply(t, sup, a)
	waitState(t, sub, "envy", inState(Stopped))

	hub := <-links.attached
	defer hub.Close()
	if err := hub.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(hub).ReadString('\n'); err != nil || line != "hello hub\n" {
		t.Errorf("hub read %q, %v", line, err)
	}
	links.mu.Lock()
	if want := []string{"attach envy", "detach envy"}; !slices.Equal(links.events, want) {
		t.Errorf("link events %q, want %q", links.events, want)
	}
	links.mu.Unlock()

	lines, err := sup.Logs("envy", 0)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	fds := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l.Text, "="); ok && strings.HasPrefix(k, "env ") {
			env[strings.TrimPrefix(k, "env ")] = v
			continue
		}
		// ls -l: "lrwx------ 1 root root 64 Dec  1 19:34 3 -> socket:[123]"
		if before, target, ok := strings.Cut(l.Text, " -> "); ok {
			f := strings.Fields(before)
			fds[f[len(f)-1]] = target
		}
	}
	if !strings.HasPrefix(fds["3"], "socket:") {
		t.Errorf("fd 3 is %q, want the hub socket (fds %q)", fds["3"], fds)
	}
	for fd, target := range fds {
		if n, _ := strconv.Atoi(fd); n > 3 {
			t.Errorf("app inherited descriptor %s → %s: only 0-3 may survive", fd, target)
		}
	}
	for _, kv := range secrets {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := env[k]; ok {
			t.Errorf("app sees %s=%s", k, v)
		}
	}
	for k, want := range map[string]string{jail.EnvAppID: "envy", jail.EnvHubFD: "3", "LANG": "C.UTF-8"} {
		if env[k] != want {
			t.Errorf("app sees %s=%q, want %q", k, env[k], want)
		}
	}
}

// TestApplySwapped: Swapped is called once Status lists every app of the
// manifest, before Apply returns (the daemon serves its control socket
// from then on, so that a client never sees an empty list), and not for
// a manifest Apply refuses.
func TestApplySwapped(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, nil)
	var listed []string
	called := false
	m := &policy.Manifest{Version: 1, Apps: []policy.App{testApp(exe, "a", "sleep", true), testApp(exe, "b", "sleep", false)}}
	if _, err := sup.Apply(context.Background(), m, ApplyOptions{Swapped: func() {
		called = true
		st, _ := sup.Status("")
		for _, a := range st {
			listed = append(listed, a.ID)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if !called || strings.Join(listed, ",") != "a,b" {
		t.Fatalf("Swapped called %v, listing %q; want a,b", called, listed)
	}
	bad := &policy.Manifest{Version: 1, Apps: []policy.App{testApp(exe, "c", "sleep", true), testApp(exe, "c", "sleep", true)}}
	if _, err := sup.Apply(context.Background(), bad, ApplyOptions{Swapped: func() { t.Error("Swapped called for a refused manifest") }}); err == nil {
		t.Fatal("duplicate ids applied")
	}
}

func TestApplyReload(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(c *testConfig) { c.StopGrace = 300 * time.Millisecond })
	apply(t, sup, testApp(exe, "a", "sleep", true), testApp(exe, "b", "sleep", true))
	a, b := status(t, sup, "a"), status(t, sup, "b")
	if a.State != Running || b.State != Running {
		t.Fatalf("first load: %+v %+v", a, b)
	}
	afd := pidfd(t, a.Pid)

	// A bad manifest changes nothing.
	_, err := sup.Apply(context.Background(), &policy.Manifest{Version: 1, Apps: []policy.App{
		testApp(exe, "c", "sleep", true), testApp(exe, "c", "sleep", true)}}, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), `duplicate id "c"`) {
		t.Fatalf("duplicate ids: %v", err)
	}
	if st, _ := sup.Status(""); len(st) != 2 || st[0].Pid != a.Pid || st[1].Pid != b.Pid {
		t.Fatalf("after a refused apply: %+v", st)
	}

	changed := testApp(exe, "b", "sleep", true)
	changed.Env["EXTRA"] = "1"
	done := applyOpt(t, sup, ApplyOptions{}, false, changed, testApp(exe, "c", "sleep", true), testApp(exe, "d", "sleep", false))
	if !slices.Equal(done.Added, []string{"c", "d"}) || !slices.Equal(done.Removed, []string{"a"}) || !slices.Equal(changes(done.Restarted), []string{"b: environment"}) {
		t.Errorf("Apply did %+v", done)
	}
	awaitGone(t, afd, "removed app a")
	if _, err := sup.Status("a"); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("removed app: %v", err)
	}
	all, err := sup.Status("")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range all {
		got = append(got, st.ID+":"+string(st.State))
	}
	if want := []string{"b:running", "c:running", "d:stopped"}; !slices.Equal(got, want) {
		t.Fatalf("after reload: %q, want %q", got, want)
	}
	if all[0].Pid == b.Pid || all[0].Pid != done.Restarted[0].Status.Pid {
		t.Errorf("changed app b: pid %d → %d, want the restart's new process", b.Pid, all[0].Pid)
	}

	// An app removed and added back starts again.
	apply(t, sup, changed)
	apply(t, sup, changed, testApp(exe, "c", "sleep", true))
	if st := status(t, sup, "c"); st.State != Running {
		t.Fatalf("re-added app: %+v", st)
	}
}

func TestLogsBounded(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(c *testConfig) { c.LogLines = 10 })
	sub := sup.Subscribe(4096)
	defer sub.Close()
	a := testApp(exe, "chatty", "lines", true)
	a.Env[linesEnv] = "50"
	a.Env[longEnv] = "10000"
	apply(t, sup, a)
	st := waitState(t, sub, "chatty", inState(Stopped))
	if st.LastExit == nil || !st.LastExit.Clean() {
		t.Fatalf("exit: %+v", st.LastExit)
	}
	lines, err := sup.Logs("chatty", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 10 {
		t.Fatalf("kept %d lines, want 10", len(lines))
	}
	var stdout []string
	var long bool
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.Text, "xxx"):
			long = true
			if len(l.Text) > maxLineBytes+len(truncatedMark) || !strings.HasSuffix(l.Text, truncatedMark) {
				t.Errorf("long line kept as %d bytes", len(l.Text))
			}
		default:
			stdout = append(stdout, l.Text)
		}
		if l.App != "chatty" || l.At.IsZero() {
			t.Errorf("line %+v", l)
		}
	}
	if !long {
		t.Error("missing the long line")
	}
	if len(stdout) != 9 || stdout[len(stdout)-1] != "line 49" {
		t.Errorf("stdout lines kept: %q", stdout)
	}
	last, _ := sup.Logs("chatty", 3)
	if len(last) != 3 || last[2] != lines[9] {
		t.Errorf("Logs(3) = %+v", last)
	}
}

// TestDaemonKilled runs the test binary as a daemon with two apps,
// SIGKILLs it and checks that its apps die with it.
func TestDaemonKilled(t *testing.T) {
	cmd := exec.Command(testExe(t))
	cmd.Env = append(os.Environ(), modeEnv+"=daemon")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	sc := bufio.NewScanner(out)
	var fds []int
	for len(fds) < 2 && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "pid" || f[2] != string(Running) {
			t.Fatalf("daemon said %q", sc.Text())
		}
		pid, _ := strconv.Atoi(f[3])
		fds = append(fds, pidfd(t, pid))
	}
	if len(fds) != 2 {
		t.Fatalf("daemon printed %d pids: %v", len(fds), sc.Err())
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	// What is guaranteed: each app's leader dies with the daemon (its
	// parent-death signal, tied to the daemon's spawner thread). What is
	// not, until apps get a cgroup: a process the app forked does not get
	// that signal and can outlive a SIGKILLed daemon (see doc.go).
	for i, fd := range fds {
		awaitGone(t, fd, "app "+strconv.Itoa(i+1)+" of the killed daemon")
	}
}

func TestShutdownStopsApps(t *testing.T) {
	exe := testExe(t)
	cfg := Config{Launcher: jail.NewLauncher(jail.Config{}), Log: zaptest.NewLogger(t), StopGrace: 300 * time.Millisecond}
	events := withEvents(&cfg)
	sup, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	started(t, sup, events)
	sub := sup.Subscribe(1024)
	// Apply before Run is taken, and waits for Run to do the autostart.
	applied := make(chan error, 1)
	go func() {
		_, err := sup.Apply(context.Background(), &policy.Manifest{Apps: []policy.App{
			testApp(exe, "a", "sleep", true), testApp(exe, "b", "ignoreterm", true)}}, ApplyOptions{})
		applied <- err
	}()
	// Nothing announces that Apply has taken the manifest: poll, bounded,
	// until both apps are listed, so Run surely starts after it.
	for deadline := time.Now().Add(waitFor); ; time.Sleep(time.Millisecond) {
		if st, _ := sup.Status(""); len(st) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Apply before Run did not take the manifest")
		}
	}
	select {
	case err := <-applied:
		t.Fatalf("Apply returned before Run started the apps: %v", err)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for len(pids) < 2 {
		select {
		case ev := <-sub.Events():
			if ev.Kind == KindState && ev.State.State == Running {
				pids[ev.State.ID] = ev.State.Pid
			}
		case <-time.After(waitFor):
			t.Fatal("apps did not start")
		}
	}
	var fds []int
	for _, pid := range pids {
		fds = append(fds, pidfd(t, pid))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		awaitGone(t, fd, "app after shutdown")
	}
	if _, err := sup.Start(context.Background(), "a"); !errors.Is(err, ErrShutdown) {
		t.Errorf("start after shutdown: %v", err)
	}
	if _, err := sup.Apply(context.Background(), &policy.Manifest{}, ApplyOptions{}); !errors.Is(err, ErrShutdown) {
		t.Errorf("apply after shutdown: %v", err)
	}
}

// TestStartWhileStopping: a Start that arrives while the app is stopping
// waits for the stop to finish, then starts a new process.
func TestStartWhileStopping(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(c *testConfig) { c.StopGrace = 300 * time.Millisecond })
	sub := sup.Subscribe(1024)
	defer sub.Close()
	apply(t, sup, testApp(exe, "stubborn", "ignoreterm", true))
	waitLog(t, sub, "stubborn", "ready")
	old := status(t, sup, "stubborn").Pid

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	stopped := make(chan AppStatus, 1)
	go func() {
		st, err := sup.Stop(ctx, "stubborn")
		if err != nil {
			t.Error(err)
		}
		stopped <- st
	}()
	waitState(t, sub, "stubborn", inState(Stopping))
	st, err := sup.Start(ctx, "stubborn")
	if err != nil || st.State != Running || st.Pid == old {
		t.Fatalf("start while stopping: %+v, %v (old pid %d)", st, err, old)
	}
	if s := <-stopped; s.State != Stopped || s.LastExit == nil || s.LastExit.Signal != "SIGKILL" {
		t.Fatalf("the stop's answer: %+v", s)
	}
}

// TestReaddWhileStopping: an app removed and added back before its old
// process is gone gets a new process only once the old one has ended.
func TestReaddWhileStopping(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, func(c *testConfig) { c.StopGrace = 500 * time.Millisecond })
	sub := sup.Subscribe(1024)
	defer sub.Close()
	a := testApp(exe, "phoenix", "ignoreterm", true)
	apply(t, sup, a)
	waitLog(t, sub, "phoenix", "ready")
	oldFD := pidfd(t, status(t, sup, "phoenix").Pid)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sup.Apply(short, &policy.Manifest{}, ApplyOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("removal within 50ms of an app with a 500ms grace: %v", err)
	}
	if _, err := sup.Status("phoenix"); !errors.Is(err, ErrUnknownApp) {
		t.Fatalf("removed app still listed: %v", err)
	}
	apply(t, sup, a)
	// The new process was started after the old one was gone.
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(oldFD), Events: unix.POLLIN}}, 0)
	if err != nil || n != 1 {
		t.Fatalf("old process still alive when the re-added app started (poll %d, %v)", n, err)
	}
	if st := status(t, sup, "phoenix"); st.State != Running {
		t.Fatalf("re-added app: %+v", st)
	}
}

// TestAutostartShownStartingBeforeItsStart: an autostart app whose first
// start has not begun (the supervisor not running yet: the daemon's
// start, answered on a socket-activated control socket) is shown
// starting; an app that does not autostart is stopped.
func TestAutostartShownStartingBeforeItsStart(t *testing.T) {
	sup, err := New(Config{Launcher: jail.NewLauncher(jail.Config{}), Log: zaptest.NewLogger(t), Dirs: policy.Dirs{Data: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	// Applied before Run, with a context already done: the apps are in
	// place and Apply does not wait for their starts.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := &policy.Manifest{Apps: []policy.App{{ID: "auto", Autostart: true}, {ID: "manual"}}}
	if _, err := sup.Apply(ctx, m, ApplyOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply before Run with a done context: %v", err)
	}
	all, err := sup.Status("")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]State{}
	for _, a := range all {
		got[a.ID] = a.State
	}
	if got["auto"] != Starting || got["manual"] != Stopped {
		t.Fatalf("states %v, want auto starting and manual stopped", got)
	}
}
