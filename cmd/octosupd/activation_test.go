package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/policy"
)

// activationRoundsEnv sets how many rounds TestSocketActivationStartsEveryApp
// runs per spawn path (default 10, what make test runs).
const activationRoundsEnv = "OCTOSUP_TEST_ACTIVATION_ROUNDS"

// activationApps is how many apps each round's manifest starts.
const activationApps = 5

// TestSocketActivationStartsEveryApp runs the built octosupd as
// octosupd.socket does, under the real systemd-socket-activate, with a
// manifest of five jailed apps, round after round, on both spawn paths:
// every app of every round must run and show, by a byte on its FIFO,
// that its fd 3 is a hub. The activated listener arrives on fd 3, which
// the daemon frees once it took the socket: the in-process spawn lost
// starts to it ("landlock: add /proc/self: EBADFD", 1 round in 10).
//
// OCTOSUP_TEST_ACTIVATION_ROUNDS=100 gives the figure of the issue.
func TestSocketActivationStartsEveryApp(t *testing.T) {
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate not found (Debian's systemd package): the real socket activation cannot be run")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH: cannot build octosupd")
	}
	if testing.Short() {
		t.Skip("-short: builds and runs the daemon")
	}
	rounds := 10
	if s := os.Getenv(activationRoundsEnv); s != "" {
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("%s=%q: want a positive number of rounds", activationRoundsEnv, s)
		}
	}
	// The binaries make build makes, in one directory: octosupd finds
	// octosup-jail next to itself.
	bin := t.TempDir()
	goBuild(t, gobin, bin, false, "octosup/cmd/octosupd", "octosup/bench/hubping")
	goBuild(t, gobin, bin, false, "octosup/cmd/octosup-jail") // cgo: its setup sequence is C

	for _, spawn := range []string{"fork", "helper"} {
		t.Run(spawn, func(t *testing.T) {
			a := newActivation(t, bin)
			var failed []string
			for round := range rounds {
				if err := a.round(activate, spawn); err != nil {
					failed = append(failed, fmt.Sprintf("round %d: %v", round+1, err))
				}
			}
			t.Logf("socket activation, --jail-spawn %s: %d/%d rounds started every app", spawn, rounds-len(failed), rounds)
			for i, f := range failed {
				if i == 5 {
					t.Errorf("… and %d more rounds failed", len(failed)-i)
					break
				}
				t.Error(f)
			}
		})
	}
}

func goBuild(t *testing.T, gobin, dir string, static bool, pkgs ...string) {
	t.Helper()
	cmd := exec.Command(gobin, append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", pkgs, err, out)
	}
}

// activation is one user's environment for the rounds: a temporary home,
// the XDG directories, a manifest of hubping apps, each with a FIFO in
// an rw external directory of its own.
type activation struct {
	t        *testing.T
	octosupd string
	vars     map[string]string
	sock     string // where octosupd.socket listens: %t/octosup/control.sock
	manifest string
	fifos    map[string]string // app → its FIFO
}

func newActivation(t *testing.T, bin string) *activation {
	root := t.TempDir()
	a := &activation{t: t, octosupd: filepath.Join(bin, "octosupd"), fifos: map[string]string{}, vars: map[string]string{
		"HOME":            filepath.Join(root, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(root, "run"),
		"XDG_CONFIG_HOME": filepath.Join(root, "config"),
		"XDG_STATE_HOME":  filepath.Join(root, "state"),
		"XDG_DATA_HOME":   filepath.Join(root, "data"),
	}}
	a.sock = filepath.Join(a.vars["XDG_RUNTIME_DIR"], "octosup", "control.sock")
	for _, d := range append(slices.Collect(maps.Values(a.vars)), filepath.Dir(a.sock)) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	m := policy.Manifest{Version: 1}
	for i := range activationApps {
		id := "ping-" + strconv.Itoa(i+1)
		dir := filepath.Join(root, "fifo", id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		a.fifos[id] = filepath.Join(dir, "ping")
		if err := unix.Mkfifo(a.fifos[id], 0o600); err != nil {
			t.Fatal(err)
		}
		m.Apps = append(m.Apps, policy.App{
			ID:        id,
			Exec:      []string{filepath.Join(bin, "hubping"), a.fifos[id]},
			Autostart: true,
			// A start that fails stays failed: the round sees it.
			Restart: policy.RestartOnRequest,
			Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &no,
				External: []policy.External{{Path: dir, Access: policy.AccessRW}}},
		})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	a.manifest = filepath.Join(root, "native-apps.json")
	if err := os.WriteFile(a.manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// round runs one activation: systemd-socket-activate listens, the first
// connection (a status) makes it exec octosupd, every app must reach
// running and ping its FIFO, and SIGTERM stops the daemon cleanly.
func (a *activation) round(activate, spawn string) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// systemd removes the socket when the unit stops (RemoveOnStop=);
	// systemd-socket-activate leaves it.
	if err := os.Remove(a.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Each round its own FIFO descriptors: a byte a previous round left
	// goes with them.
	fifos := map[string]int{}
	for id, p := range a.fifos {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the FIFO of %s: %w", id, err)
		}
		defer unix.Close(fd)
		fifos[id] = fd
	}

	// systemd-socket-activate passes on TERM, PATH, USER and HOME of its
	// own environment, and what -E names.
	args := []string{"-l", a.sock}
	for k, v := range a.vars {
		if k != "HOME" {
			args = append(args, "-E", k+"="+v)
		}
	}
	args = append(args, a.octosupd, "run", "--config", a.manifest, "--jail-spawn", spawn)
	cmd := exec.Command(activate, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + a.vars["HOME"]}
	log := newWatchLog("Listening on ")
	cmd.Stderr = log
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
			return
		default:
		}
		cmd.Process.Kill()
		<-exited
	}()
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nthe daemon's log:\n%s", err, log.String())
		}
	}()
	select {
	case <-log.seen:
	case err := <-exited:
		exited <- err
		return fmt.Errorf("systemd-socket-activate exited before it listened: %v", err)
	case <-ctx.Done():
		return fmt.Errorf("systemd-socket-activate did not listen on %s", a.sock)
	}

	// The first connection, which makes systemd-socket-activate exec the
	// daemon, is a status that hangs up at once, as octosupctl's does;
	// until every app runs, more of them come and go. Each takes the
	// lowest free descriptor in the daemon for a moment: fd 3, once the
	// daemon has taken the activated listener off it.
	c := &control.Client{Path: a.sock}
	var st control.StatusData
	if err := c.Do(ctx, control.OpStatus, nil, &st); err != nil {
		return fmt.Errorf("status on the activated socket: %w", err)
	}
	sub, err := c.Subscribe(ctx, control.TopicState)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer sub.Close()
	pollCtx, stopPolls := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			c.Do(pollCtx, control.OpStatus, nil, nil)
		}
	}()
	stopPolling := sync.OnceFunc(func() { stopPolls(); <-polled })
	defer stopPolling()
	if err := c.Do(ctx, control.OpStatus, nil, &st); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	states := map[string]control.StateEvent{}
	for _, s := range st.Apps {
		states[s.ID] = control.StateEvent{App: s.ID, State: s.State, Pid: s.Pid, LastExit: s.LastExit, Reason: s.Reason}
	}
	if len(states) != activationApps {
		return fmt.Errorf("status has %d apps, want %d", len(states), activationApps)
	}
	for {
		var notRunning []string
		for id, s := range states {
			switch {
			case s.State == "failed" || s.State == "stopped" && s.LastExit != nil:
				return fmt.Errorf("%s is %s: %s", id, s.State, stateWhy(s))
			case s.State != "running":
				notRunning = append(notRunning, id+" "+s.State)
			}
		}
		if len(notRunning) == 0 {
			stopPolling()
			break
		}
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return fmt.Errorf("the subscription ended: %w", sub.Err())
			}
			var se control.StateEvent
			if ev.Name == control.TopicState && ev.Decode(&se) == nil {
				states[se.App] = se
			}
		case <-ctx.Done():
			slices.Sort(notRunning)
			return fmt.Errorf("not every app is running: %s", strings.Join(notRunning, ", "))
		}
	}
	if err := awaitPings(ctx, fifos); err != nil {
		return err
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			return fmt.Errorf("octosupd on SIGTERM: %w", err)
		}
	case <-ctx.Done():
		return errors.New("octosupd did not stop on SIGTERM")
	}
	return nil
}

// stateWhy is what an app's state event says of why it is not running.
func stateWhy(s control.StateEvent) string {
	why := []string{}
	if s.Reason != "" {
		why = append(why, s.Reason)
	}
	if s.LastExit != nil {
		why = append(why, "last exit: "+s.LastExit.String())
	}
	if len(why) == 0 {
		return "no reason given"
	}
	return strings.Join(why, "; ")
}

// awaitPings returns once every FIFO has had its app's byte: hubping
// writes it only after its write to fd 3 found a socket there.
func awaitPings(ctx context.Context, fifos map[string]int) error {
	waiting := map[int]string{}
	for id, fd := range fifos {
		waiting[fd] = id
	}
	for len(waiting) > 0 {
		var pfds []unix.PollFd
		for fd := range waiting {
			pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		if left <= 0 {
			var ids []string
			for _, id := range waiting {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			return fmt.Errorf("running, but no ping on the FIFO of %s", strings.Join(ids, ", "))
		}
		if _, err := unix.Poll(pfds, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			return fmt.Errorf("poll the FIFOs: %w", err)
		}
		for _, p := range pfds {
			if p.Revents&unix.POLLIN != 0 {
				var b [16]byte
				if n, err := unix.Read(int(p.Fd), b[:]); n > 0 && err == nil {
					delete(waiting, int(p.Fd))
				}
			}
		}
	}
	return nil
}

// watchLog keeps what the daemon (and systemd-socket-activate before
// it) logs, and closes seen once a line has the marker.
type watchLog struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	once   sync.Once
}

func newWatchLog(marker string) *watchLog {
	return &watchLog{marker: marker, seen: make(chan struct{})}
}

func (w *watchLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte(w.marker)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
