package jail

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"octosup/policy"
)

// helperEnv names the octosup-jail binary the tests run as the helper.
// TestMain builds it once per run of the test binary (cmd/octosup-jail,
// static, as make builds it: the binary production runs) unless the
// variable already names one, as it does for the copy TestAsNobody runs.
const helperPathEnv = "OCTOSUP_TEST_JAIL_HELPER"

func TestMain(m *testing.M) {
	// This binary is also a helper (the re-exec path other packages' tests
	// and TestReexecHelper use: jail/spawn's constructor runs it before
	// this) and every probe.
	if IsHelper(os.Args) {
		os.Exit(RunHelper())
	}
	if len(os.Args) >= 2 && os.Args[1] == probeArg {
		os.Exit(runProbe(os.Args[2:]))
	}
	// The race runtime sleeps a second at exit unless told not to; every
	// probe and helper is such an exit.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cleanup := func() {}
	if os.Getenv(helperPathEnv) == "" {
		dir, err := os.MkdirTemp("", "octosup-jail-helper-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cleanup = func() { os.RemoveAll(dir) }
		bin, err := buildHelper(dir)
		if err != nil {
			cleanup()
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv(helperPathEnv, bin)
	}
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildHelper builds cmd/octosup-jail into dir as make build does
// (HelperLDFlags: static) and returns its path. The directory is made readable
// by everyone: TestAsNobody's copy comes from it.
func buildHelper(dir string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build the jail helper: no go command in PATH: %w", err)
	}
	bin := filepath.Join(dir, HelperName)
	cmd := exec.Command(gobin, "build", "-ldflags", helperLDFlags, "-o", bin, "octosup/cmd/octosup-jail")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the jail helper (go build octosup/cmd/octosup-jail): %v\n%s", err, out)
	}
	return bin, nil
}

// standaloneHelper is the octosup-jail binary TestMain built.
func standaloneHelper(t testing.TB) string {
	t.Helper()
	p := os.Getenv(helperPathEnv)
	if p == "" {
		t.Fatal(helperPathEnv + " is unset: TestMain builds the helper")
	}
	return p
}

// spawner is the test's counterpart of the supervisor's spawner thread:
// one goroutine locked to its OS thread for the test's life, so that the
// parent-death signal of the children it forks does not fire early.
type spawner struct {
	reqs chan func()
	done chan struct{}
}

func newSpawner(t testing.TB) *spawner {
	s := &spawner{reqs: make(chan func()), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for f := range s.reqs {
			f()
		}
	}()
	t.Cleanup(func() {
		close(s.reqs)
		<-s.done
	})
	return s
}

func (s *spawner) do(f func()) {
	done := make(chan struct{})
	s.reqs <- func() { defer close(done); f() }
	<-done
}

// harness runs probes as jailed apps of a fake user whose home, data and
// runtime directories live in a temporary directory.
type harness struct {
	t     testing.TB
	sp    *spawner
	l     *Launcher
	dirs  policy.Dirs
	probe string // the test binary
	// helper is octosup-jail, the standalone helper production runs.
	helper string
	// processes is probeApp's default for sandbox.processes.
	processes bool
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dirs := policy.Dirs{
		Home:    filepath.Join(root, "home"),
		Config:  filepath.Join(root, "home/.config/octosup"),
		State:   filepath.Join(root, "home/.local/state/octosup"),
		Data:    filepath.Join(root, "home/.local/share/octosup"),
		Runtime: filepath.Join(root, "run/octosup"),
	}
	for _, d := range []string{dirs.Home, dirs.State, dirs.Runtime} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	bin := standaloneHelper(t)
	return &harness{t: t, sp: newSpawner(t), l: NewLauncher(Config{HelperPath: bin}), dirs: dirs, probe: exe, helper: bin}
}

// probeApp is an app entry whose program is the probe doing action.
func (h *harness) probeApp(id string, args ...string) policy.App {
	no := h.processes
	return policy.App{
		ID:      id,
		Exec:    append([]string{h.probe, probeArg}, args...),
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &no},
		Storage: policy.Storage{Jail: true, Secrets: true},
		// In the entry's env, not the daemon's: a jail app's environment
		// is an allow list. Without it each race-built probe sleeps a
		// second at its exit.
		Env: map[string]string{"GORACE": os.Getenv("GORACE")},
	}
}

// outcome is what one run of a probe said.
type outcome struct {
	out    string // the probe's stdout, trimmed
	report Report
	err    error // Confirm's
	forked bool  // spawned in-process, not through the helper
}

// runApp starts app through the Launcher, waits for it to exit and returns
// what it printed. hubFD, when given, is sent down the hub first.
func (h *harness) runApp(app policy.App, baseEnv []string, hubFD *os.File) outcome {
	h.t.Helper()
	return h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
		return h.l.Start(Request{App: app, Dirs: h.dirs, BaseEnv: baseEnv, Stdout: stdout, Stderr: stderr, Hub: hub})
	}, hubFD)
}

func (h *harness) runWith(start func(stdout, stderr, hub *os.File) (*Process, error), hubFD *os.File) outcome {
	h.t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		h.t.Fatal(err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		h.t.Fatal(err)
	}
	defer errR.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "hub"), os.NewFile(uintptr(pair[1]), "hub-app")
	defer ours.Close()
	if hubFD != nil {
		if err := unix.Sendmsg(pair[0], []byte{0}, unix.UnixRights(int(hubFD.Fd())), nil, 0); err != nil {
			h.t.Fatal(err)
		}
	}
	var p *Process
	h.sp.do(func() { p, err = start(outW, errW, theirs) })
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		return outcome{err: err}
	}
	defer unix.Close(p.Pidfd)
	rep, cerr := p.Confirm()
	// The daemon answers the app's notified calls (bind, listen,
	// inotify_add_watch) for as long as it runs, as the supervisor does.
	var served chan error
	if g := p.Guard(); g != nil {
		served = make(chan error, 1)
		go func() { served <- g.Serve(context.Background()) }()
	}
	stdout, _ := io.ReadAll(outR)
	stderr, _ := io.ReadAll(errR)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, p.Pidfd, &info, unix.WEXITED, nil); err != nil {
		h.t.Fatalf("wait: %v", err)
	}
	if served != nil {
		if err := <-served; err != nil {
			h.t.Errorf("guard of %d: %v", p.Pid, err)
		}
	}
	if len(stderr) > 0 {
		h.t.Logf("stderr of %d: %s", p.Pid, bytes.TrimSpace(stderr))
	}
	return outcome{out: strings.TrimSpace(string(stdout)), report: rep, err: cerr, forked: p.forked}
}

// runPlain runs the probe without a jail: the positive control that the
// action works at all outside it.
func (h *harness) runPlain(args ...string) string {
	h.t.Helper()
	cmd := exec.Command(h.probe, append([]string{probeArg}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("plain probe %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
