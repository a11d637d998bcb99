package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"octosup/jail"
	"octosup/policy"
)

// applyOpt is apply with options, returning what Apply did.
func applyOpt(t testing.TB, sup *Supervisor, opt ApplyOptions, dev bool, apps ...policy.App) Applied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	done, err := sup.Apply(ctx, &policy.Manifest{Version: 1, DeveloperMode: dev, Apps: apps}, opt)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return done
}

// changes lists an Applied's app changes as "id: part,part".
func changes(list []AppChange) []string {
	var out []string
	for _, c := range list {
		out = append(out, c.ID+": "+strings.Join(c.Changed, ","))
	}
	return out
}

// TestReloadRestartsWhatChanged: a reload restarts a running app exactly
// when what its process runs changed — its compiled jail, program,
// arguments, environment or directory — and says what changed; a change
// the process does not run (grants, name, restart policy) keeps its pid.
func TestReloadRestartsWhatChanged(t *testing.T) {
	exe := testExe(t)
	link := filepath.Join(t.TempDir(), "app")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	no := false
	for _, tc := range []struct {
		name string
		edit func(*policy.App)
		dev  bool
		want []string // nil: kept running
	}{
		{"unchanged", func(*policy.App) {}, false, nil},
		{"what the process does not run", func(a *policy.App) {
			a.Name, a.Restart, a.Autostart = "Renamed", policy.RestartOnFailure, false
			a.Grants = policy.Grants{Services: []string{policy.ServiceAgent}, Methods: []string{policy.MethodSessionOpen}, Tools: []string{"a.b"}}
			a.Sandbox.Accounts = []string{"personal"}
		}, false, nil},
		{"environment", func(a *policy.App) { a.Env["EXTRA"] = "1" }, false, []string{ChangedEnv}},
		{"argv", func(a *policy.App) { a.Exec = append(a.Exec, "--verbose") }, false, []string{ChangedArgv}},
		{"exec", func(a *policy.App) { a.Exec[0] = link }, false, []string{ChangedExec}},
		{"jail", func(a *policy.App) { a.Sandbox.Processes = &no }, false, []string{ChangedJail}},
		{"directory", func(a *policy.App) { a.Storage.Jail = true }, false, []string{ChangedEnv, ChangedDir}},
		{"developer mode", func(*policy.App) {}, true, []string{ChangedJail}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sup := startSup(t, nil)
			applyOpt(t, sup, ApplyOptions{}, false, testApp(exe, "a", "sleep", true))
			before := status(t, sup, "a")
			gone := pidfd(t, before.Pid)

			changed := testApp(exe, "a", "sleep", true)
			tc.edit(&changed)
			done := applyOpt(t, sup, ApplyOptions{}, tc.dev, changed)
			after := status(t, sup, "a")
			if tc.want == nil {
				if len(done.Restarted) != 0 || after.Pid != before.Pid {
					t.Fatalf("restarted %q, pid %d → %d: want it kept running", changes(done.Restarted), before.Pid, after.Pid)
				}
				return
			}
			if want := []string{"a: " + strings.Join(tc.want, ",")}; !slices.Equal(changes(done.Restarted), want) {
				t.Fatalf("restarted %q, want %q", changes(done.Restarted), want)
			}
			awaitGone(t, gone, "the process of the old entry")
			if st := done.Restarted[0].Status; st.State != Running || st.Pid == before.Pid || st.Pid != after.Pid || len(after.Stale) != 0 {
				t.Fatalf("after the restart: answer %+v, status %+v (old pid %d)", st, after, before.Pid)
			}
			if len(done.Added)+len(done.Removed)+len(done.Stale) != 0 {
				t.Errorf("also reported %+v", done)
			}
		})
	}
}

// manifestFile reads a manifest of testdata/reload with the test binary
// as its program.
func manifestFile(t *testing.T, name string) *policy.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "reload", name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.Parse([]byte(strings.ReplaceAll(string(b), "@EXE@", testExe(t))))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// TestReloadReformattedKeepsRunning: the same entry written another way
// (keys reordered, defaults spelled out, empty lists, lists reordered)
// compiles to the same jail, and a jailed app keeps running.
func TestReloadReformattedKeepsRunning(t *testing.T) {
	sup := startSup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sup.Apply(ctx, manifestFile(t, "compact.json"), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	before := status(t, sup, "a")
	if before.State != Running {
		t.Fatalf("the jailed app: %+v", before)
	}
	done, err := sup.Apply(ctx, manifestFile(t, "reformatted.json"), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after := status(t, sup, "a"); len(done.Restarted) != 0 || after.Pid != before.Pid {
		t.Fatalf("a reformatted manifest restarted %q (pid %d → %d)", changes(done.Restarted), before.Pid, after.Pid)
	}
}

// TestReloadKeepRunning: with KeepRunning a changed app keeps its process
// and its status says what is stale, until it is restarted; a reload
// that undoes the change clears the mark, and one without KeepRunning
// restarts it.
func TestReloadKeepRunning(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, nil)
	orig := testApp(exe, "a", "sleep", true)
	applyOpt(t, sup, ApplyOptions{}, false, orig, testApp(exe, "off", "sleep", false))
	pid := status(t, sup, "a").Pid
	changed := testApp(exe, "a", "sleep", true)
	changed.Env["EXTRA"] = "1"
	changedOff := testApp(exe, "off", "sleep", false)
	changedOff.Env["EXTRA"] = "1"
	keep := ApplyOptions{KeepRunning: true}

	done := applyOpt(t, sup, keep, false, changed, changedOff)
	st := status(t, sup, "a")
	if want := []string{"a: environment"}; !slices.Equal(changes(done.Stale), want) || len(done.Restarted) != 0 {
		t.Fatalf("stale %q, restarted %q: want stale %q and nothing restarted (a stopped app is not stale)", changes(done.Stale), changes(done.Restarted), want)
	}
	if st.Pid != pid || !slices.Equal(st.Stale, []string{ChangedEnv}) || !slices.Equal(done.Stale[0].Status.Stale, st.Stale) {
		t.Fatalf("status %+v (pid was %d), want the same pid, stale environment", st, pid)
	}
	if off := status(t, sup, "off"); len(off.Stale) != 0 {
		t.Errorf("a stopped app is marked stale: %+v", off)
	}

	// Undone: nothing is stale any more.
	applyOpt(t, sup, keep, false, orig, changedOff)
	if st := status(t, sup, "a"); st.Pid != pid || len(st.Stale) != 0 {
		t.Fatalf("after the change was undone: %+v", st)
	}

	// Stale again, then a restart runs the new entry.
	applyOpt(t, sup, keep, false, changed, changedOff)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sup.Restart(ctx, "a")
	if err != nil || st.Pid == pid || len(st.Stale) != 0 {
		t.Fatalf("restart of a stale app: %+v, %v", st, err)
	}
	if again := applyOpt(t, sup, ApplyOptions{}, false, changed, changedOff); len(again.Restarted)+len(again.Stale) != 0 {
		t.Fatalf("the restarted app runs its entry, yet a reload found %+v", again)
	}

	// Stale, then a reload without KeepRunning restarts it.
	pid = st.Pid
	applyOpt(t, sup, keep, false, orig, changedOff)
	done = applyOpt(t, sup, ApplyOptions{}, false, orig, changedOff)
	if after := status(t, sup, "a"); !slices.Equal(changes(done.Restarted), []string{"a: environment"}) || after.Pid == pid || len(after.Stale) != 0 {
		t.Fatalf("a reload of a stale app: restarted %q, status %+v (pid was %d)", changes(done.Restarted), after, pid)
	}
}

// TestReloadWhileStarting: an app whose process is starting with the old
// entry when the reload comes is restarted once it runs, so that no
// process of the old entry is left.
func TestReloadWhileStarting(t *testing.T) {
	exe := testExe(t)
	gate := make(chan struct{})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	deferred := make(chan zapcore.Entry, 1)
	var gated bool
	sup := startSupLaunch(t, func(c *testConfig) {
		c.Log = zap.New(zapcore.NewTee(c.Log.Core(), entryCore{"manifest change waits for the start under way", deferred}))
	}, func(launch launchFunc) launchFunc {
		return func(req jail.Request) (spawned, error) {
			sp, err := launch(req)
			if err == nil && !gated { // the spawner thread alone calls it
				gated = true
				sp.confirm = heldConfirm{real: sp.confirm, gate: gate}
			}
			return sp, err
		}
	})
	t.Cleanup(open) // a failed test still lets the held start go
	applyOpt(t, sup, ApplyOptions{}, false, testApp(exe, "a", "sleep", false))
	sub := sup.Subscribe(1024, KindState)
	defer sub.Close()
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_, err := sup.Start(ctx, "a")
		started <- err
	}()
	first := waitState(t, sub, "a", func(st AppStatus) bool { return st.State == Starting && st.Pid != 0 })

	changed := testApp(exe, "a", "sleep", false)
	changed.Env["EXTRA"] = "1"
	applied := make(chan Applied, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		done, err := sup.Apply(ctx, &policy.Manifest{Version: 1, Apps: []policy.App{changed}}, ApplyOptions{})
		if err != nil {
			t.Errorf("Apply: %v", err)
		}
		applied <- done
	}()
	// The starting app's goroutine took the reload's restart, for after
	// the start.
	select {
	case <-deferred:
	case <-applied:
		t.Fatal("Apply returned before the starting process ran")
	}
	open()
	if err := <-started; err != nil {
		t.Fatalf("the start under way: %v", err)
	}
	done := <-applied
	if !slices.Equal(changes(done.Restarted), []string{"a: environment"}) {
		t.Fatalf("restarted %q", changes(done.Restarted))
	}
	if st := done.Restarted[0].Status; st.State != Running || st.Pid == first.Pid {
		t.Fatalf("after the restart: %+v (the starting pid was %d)", st, first.Pid)
	}
}

// entryCore hands each log entry with message msg to entries: a test
// waits on it for what the supervisor logs.
type entryCore struct {
	msg     string
	entries chan<- zapcore.Entry
}

func (c entryCore) Enabled(zapcore.Level) bool                 { return true }
func (c entryCore) With([]zapcore.Field) zapcore.Core          { return c }
func (c entryCore) Sync() error                                { return nil }
func (c entryCore) Write(zapcore.Entry, []zapcore.Field) error { return nil }

func (c entryCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == c.msg {
		select {
		case c.entries <- e:
		default: // one is enough to wait on
		}
	}
	return ce
}

// heldConfirm reports a process's jail only once gate is closed.
type heldConfirm struct {
	real confirmer
	gate <-chan struct{}
}

func (h heldConfirm) Confirm() (jail.Report, error) {
	<-h.gate
	return h.real.Confirm()
}

// TestReloadEntryThatCannotStart: an entry whose jail does not compile
// (its program is gone) restarts its app only if the entry changed, and
// then the restart fails with the reason; unchanged, the app keeps
// running its process.
func TestReloadEntryThatCannotStart(t *testing.T) {
	exe := testExe(t)
	link := filepath.Join(t.TempDir(), "app")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	sup := startSup(t, nil)
	a := testApp(exe, "a", "sleep", true)
	a.Exec[0] = link
	applyOpt(t, sup, ApplyOptions{}, false, a)
	pid := status(t, sup, "a").Pid
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if done := applyOpt(t, sup, ApplyOptions{}, false, a); len(done.Restarted) != 0 || status(t, sup, "a").Pid != pid {
		t.Fatalf("an unchanged entry whose program is gone: restarted %q", changes(done.Restarted))
	}
	changed := a
	changed.Exec = []string{link, "--verbose"}
	done := applyOpt(t, sup, ApplyOptions{}, false, changed)
	if !slices.Equal(changes(done.Restarted), []string{"a: argv"}) {
		t.Fatalf("restarted %q, want a: argv", changes(done.Restarted))
	}
	st := done.Restarted[0].Status
	if st.State != Failed || !strings.Contains(st.Reason, "program not found") {
		t.Fatalf("the restart of an entry whose program is gone: %+v", st)
	}
	if alive := pidAlive(pid); alive {
		t.Errorf("the old process %d outlived the restart", pid)
	}
}

func pidAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/stat", pid))
	return !errors.Is(err, os.ErrNotExist)
}

// TestReloadNeighbourRefusesAGrant: a reload that gives another app write
// access where a running app's grant leads through a symlink leaves that
// app's entry, and so its process, alone (its running jail holds what it
// opened at its start), says in the log that it cannot start again, and
// its next start is refused.
func TestReloadNeighbourRefusesAGrant(t *testing.T) {
	exe := testExe(t)
	root := t.TempDir()
	shared, target := filepath.Join(root, "shared"), filepath.Join(root, "real")
	for _, d := range []string{shared, target} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(shared, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	sup := startSup(t, func(c *testConfig) { c.Log = zap.New(core) })
	jailed := func(id string, autostart bool, ext ...policy.External) policy.App {
		a := testApp(exe, id, "sleep", autostart)
		a.Sandbox = policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, External: ext}
		return a
	}
	a := jailed("a", true, policy.External{Path: link, Access: policy.AccessRO})
	applyOpt(t, sup, ApplyOptions{}, false, a, jailed("b", false))
	pid := status(t, sup, "a").Pid
	if pid == 0 {
		t.Fatalf("a: %+v", status(t, sup, "a"))
	}

	done := applyOpt(t, sup, ApplyOptions{}, false, a, jailed("b", false, policy.External{Path: shared, Access: policy.AccessRW}))
	if st := status(t, sup, "a"); len(done.Restarted) != 0 || st.Pid != pid {
		t.Fatalf("restarted %q, a %+v (pid was %d): want it left running", changes(done.Restarted), st, pid)
	}
	if n := logs.FilterMessageSnippet("its jail no longer compiles").FilterField(zap.String("app", "a")).Len(); n != 1 {
		t.Errorf("%d warnings that a cannot start again, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if st, err := sup.Restart(ctx, "a"); !errors.Is(err, ErrStartFailed) || !strings.Contains(st.Reason, "could have planted it") {
		t.Fatalf("the next start of a: %+v, %v", st, err)
	}
}

// TestStartsShareTheEntries: what each start keeps of its neighbours (to
// compare at the next Apply) is the manifest's one slice of entries, not
// a copy of the others' per app: at 500 apps the copies were n² entries,
// most of the daemon's memory.
func TestStartsShareTheEntries(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, nil)
	ids := []string{"a", "b", "c"}
	var apps []policy.App
	for _, id := range ids {
		apps = append(apps, testApp(exe, id, "sleep", true))
	}
	apply(t, sup, apps...) // waits for the starts
	for _, id := range ids {
		if st := status(t, sup, id); st.State != Running {
			t.Fatalf("%s is %s", id, st.State)
		}
	}
	sup.mu.Lock()
	defer sup.mu.Unlock()
	first := sup.apps["a"].procEntries
	for _, id := range ids {
		got := sup.apps[id].procEntries
		if len(got) != len(ids) || &got[0] != &first[0] {
			t.Fatalf("%s started with entries of its own (%d), not the manifest's", id, len(got))
		}
	}
}

// TestReloadSaysMissingLimits: an app that runs without a limit of its
// entry is said in the log at its start and again at every Apply, not
// only in its status (a supervisor without cgroups, so that cpu_weight
// is missing on any host).
func TestReloadSaysMissingLimits(t *testing.T) {
	exe := testExe(t)
	core, logs := observer.New(zap.InfoLevel)
	sup := startSup(t, func(c *testConfig) { c.Log = zap.New(core); c.noCgroup = true })
	a := testApp(exe, "talker", "sleep", true)
	a.Limits = policy.ResourceLimits{CPUWeight: 50}
	said := func() []observer.LoggedEntry {
		return logs.FilterMessage("app runs without some of its limits").FilterField(zap.String("app", "talker")).All()
	}
	apply(t, sup, a)
	if n := len(said()); n != 1 {
		t.Fatalf("said %d times at start, want once", n)
	}
	apply(t, sup, a)
	entries := said()
	if len(entries) != 2 || !slices.Contains(entries[1].ContextMap()["missing"].([]any), any("limits.cpu")) {
		t.Fatalf("said %+v after an Apply, want it said again with limits.cpu", entries)
	}
}
