package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/policy"
)

// testEnv is a user's environment inside a temporary home.
type testEnv struct {
	vars map[string]string
	dirs policy.Dirs
}

func newTestEnv(t testing.TB) testEnv {
	t.Helper()
	root := t.TempDir()
	vars := map[string]string{
		"HOME":            filepath.Join(root, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(root, "run"),
		"XDG_CONFIG_HOME": filepath.Join(root, "config"),
		"XDG_STATE_HOME":  filepath.Join(root, "state"),
		"XDG_DATA_HOME":   filepath.Join(root, "data"),
	}
	for _, d := range vars {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := policy.DirsFromEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	return testEnv{vars: vars, dirs: dirs}
}

func (e testEnv) getenv(k string) string { return e.vars[k] }

func (e testEnv) environ() []string {
	out := []string{"PATH=/usr/bin:/bin"}
	for k, v := range e.vars {
		out = append(out, k+"="+v)
	}
	return out
}

// installManifest copies a testdata manifest to the user's default place.
func (e testEnv) installManifest(t testing.TB, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	e.writeManifest(t, b)
}

func (e testEnv) writeManifest(t testing.TB, b []byte) {
	t.Helper()
	if err := os.MkdirAll(e.dirs.Config, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.dirs.ManifestPath(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

type runningDaemon struct {
	client *control.Client
	stop   func() error // cancels Run and returns its error
	// ready is the READY=1 datagram the daemon sent to NOTIFY_SOCKET,
	// and notify is that socket, where the later ones wait (next).
	ready  string
	notify *net.UnixConn
}

// next is the next datagram the daemon sent systemd, waiting up to
// wait; false: none came.
func (d *runningDaemon) next(wait time.Duration) (string, bool) {
	got, err := readNotify(d.notify, time.Now().Add(wait))
	return got, err == nil
}

// listenNotify is a socket in systemd's place: NOTIFY_SOCKET names it
// for the rest of the test, and it is closed after the test's other
// cleanups (those registered later run first).
func listenNotify(t testing.TB) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	return conn
}

// readNotify reads a datagram by deadline (zero: none).
func readNotify(conn *net.UnixConn, deadline time.Time) (string, error) {
	buf := make([]byte, 4096)
	conn.SetReadDeadline(deadline)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}

// startDaemonProcess starts cmd, this test binary run as the daemon in
// env (main_test.go), and kills it when the test ends, a no-op once it
// exited. exited has Wait's result; stderr is what the daemon logged.
func startDaemonProcess(t *testing.T, env testEnv, cmd *exec.Cmd) (exited <-chan error, stderr *strings.Builder) {
	t.Helper()
	cmd.Env = append(env.environ(), "OCTOSUP_TEST_DAEMON=1")
	stderr = &strings.Builder{}
	cmd.Stderr = stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return done, stderr
}

// startDaemon runs Run in-process with the real supervisor until it is
// ready (autostart apps started, READY=1 sent).
func startDaemon(t testing.TB, env testEnv) *runningDaemon {
	t.Helper()
	return startDaemonLogging(t, env, testLogger(t))
}

// startDaemonLogging is startDaemon logging to log.
func startDaemonLogging(t testing.TB, env testEnv, log *zap.Logger) *runningDaemon {
	t.Helper()
	return startDaemonConfig(t, env, func(c *Config) { c.Log = log })
}

// startDaemonConfig is startDaemon with its Config edited by edit. It
// is ready when it says so to systemd: NOTIFY_SOCKET is the test's.
func startDaemonConfig(t testing.TB, env testEnv, edit func(*Config)) *runningDaemon {
	t.Helper()
	notify := listenNotify(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{
		Getenv:    env.getenv,
		Environ:   env.environ(),
		Log:       testLogger(t),
		StopGrace: time.Second,
	}
	edit(&cfg)
	go func() { done <- Run(ctx, cfg) }()
	d := &runningDaemon{client: &control.Client{Path: env.dirs.ControlSocket()}, notify: notify}
	ready := make(chan string, 1)
	go func() { // ends at READY=1, or when notify is closed
		for {
			got, err := readNotify(notify, time.Time{})
			if err != nil || strings.HasPrefix(got, "READY=1") {
				ready <- got
				return
			}
		}
	}()
	select {
	case d.ready = <-ready:
	case err := <-done:
		notify.Close()
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		notify.Close()
		t.Fatal("the daemon was not ready within 30s")
	}
	var stopped bool
	var stopErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			stopErr = <-done
		}
		return stopErr
	}
	t.Cleanup(func() { stop() })
	d.stop = stop
	return d
}

func status(t *testing.T, c *control.Client) map[string]control.AppStatus {
	t.Helper()
	var d control.StatusData
	if err := c.Do(context.Background(), control.OpStatus, nil, &d); err != nil {
		t.Fatalf("status: %v", err)
	}
	out := make(map[string]control.AppStatus)
	for _, a := range d.Apps {
		out[a.ID] = a
	}
	return out
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestRunServesTheRealSupervisor(t *testing.T) {
	env := newTestEnv(t)
	env.installManifest(t, "two-apps.json")
	d := startDaemon(t, env)
	ctx := context.Background()

	// The socket and its directory are private.
	for path, want := range map[string]os.FileMode{env.dirs.Runtime: 0o700, env.dirs.ControlSocket(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}

	st := status(t, d.client)
	talker, idle := st["talker"], st["idle"]
	if len(st) != 2 || talker.State != "running" || talker.Pid == 0 || idle.State != "stopped" {
		t.Fatalf("status after start: %+v", st)
	}

	// Its output, as the app wrote it, arrives by logs with follow.
	var logs control.LogsData
	conn, err := d.client.Stream(ctx, control.OpLogs, control.LogsArgs{App: "talker", Follow: true}, &logs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, l := range logs.Lines {
		seen[l.Text] = l.Stream
	}
	for seen["hello from talker"] == "" || seen["oops"] == "" {
		ev := nextEvent(t, conn)
		var l control.LogLine
		if ev.Name != control.TopicLog || ev.Decode(&l) != nil {
			t.Fatalf("unexpected event %s", ev.Raw)
		}
		seen[l.Text] = l.Stream
	}
	conn.Close()
	if seen["hello from talker"] != "stdout" || seen["oops"] != "stderr" {
		t.Fatalf("streams: %v", seen)
	}

	// start, restart and stop, with state events to a subscriber.
	sub, err := d.client.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var sd control.StateData
	if err := d.client.Do(ctx, control.OpStart, control.AppArgs{App: "idle"}, &sd); err != nil || sd.State != "running" {
		t.Fatalf("start idle: %v %+v", err, sd)
	}
	firstPid := sd.App.Pid
	waitState(t, sub, "idle", "running")
	if err := d.client.Do(ctx, control.OpRestart, control.AppArgs{App: "idle"}, &sd); err != nil || sd.State != "running" || sd.App.Pid == firstPid {
		t.Fatalf("restart idle: %v %+v (first pid %d)", err, sd, firstPid)
	}
	if alive(firstPid) {
		t.Errorf("the first idle process %d survived its restart", firstPid)
	}
	if err := d.client.Do(ctx, control.OpStop, control.AppArgs{App: "idle"}, &sd); err != nil || sd.State != "stopped" {
		t.Fatalf("stop idle: %v %+v", err, sd)
	}
	waitState(t, sub, "idle", "stopped")
	if err := d.client.Do(ctx, control.OpStart, control.AppArgs{App: "nope"}, nil); codeOf(err) != control.CodeUnknownApp {
		t.Fatalf("start nope: %v", err)
	}

	// A bad manifest is refused with all its problems; nothing changes.
	env.installManifest(t, "bad.json")
	err = d.client.Do(ctx, control.OpReload, nil, nil)
	var cerr *control.Error
	if !errors.As(err, &cerr) || cerr.Code != control.CodeInvalidManifest {
		t.Fatalf("reload of a bad manifest: %v", err)
	}
	var probs control.ManifestProblems
	if err := json.Unmarshal(cerr.Data, &probs); err != nil || len(probs.Problems) < 4 {
		t.Fatalf("problems %s: %v", cerr.Data, err)
	}
	for _, p := range probs.Problems {
		if !strings.Contains(cerr.Message, p) {
			t.Errorf("the message does not list %q", p)
		}
	}
	after := status(t, d.client)
	if len(after) != 2 || after["talker"].Pid != talker.Pid || after["talker"].State != "running" {
		t.Fatalf("status after a refused reload: %+v, want talker still pid %d", after, talker.Pid)
	}

	// A good one applies: the added autostart app runs.
	env.installManifest(t, "three-apps.json")
	var rd control.ReloadData
	if err := d.client.Do(ctx, control.OpReload, nil, &rd); err != nil || rd.Apps != 3 {
		t.Fatalf("reload: %v %+v", err, rd)
	}
	if got := status(t, d.client); got["extra"].State != "running" || got["talker"].Pid != talker.Pid {
		t.Fatalf("status after reload: %+v", got)
	}

	extraPid := status(t, d.client)["extra"].Pid
	if err := d.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, pid := range []int{talker.Pid, extraPid} {
		if alive(pid) {
			t.Errorf("app process %d outlived the daemon", pid)
		}
	}
	if _, err := os.Stat(env.dirs.ControlSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is left behind: %v", err)
	}
}

func waitState(t *testing.T, sub *control.Conn, app, state string) {
	t.Helper()
	for {
		ev := nextEvent(t, sub)
		var st control.StateEvent
		if ev.Decode(&st) == nil && st.App == app && st.State == state {
			return
		}
	}
}

func TestRunRefusesABadManifest(t *testing.T) {
	tests := []struct {
		name     string
		manifest string // testdata file; "" = none
		want     string
		invalid  bool
	}{
		{name: "invalid", manifest: "bad.json", want: `"Bad_ID" must be`, invalid: true},
		{name: "missing", want: "no manifest at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			if tt.manifest != "" {
				env.installManifest(t, tt.manifest)
			}
			err := Run(context.Background(), Config{Getenv: env.getenv, Environ: env.environ(), Log: zaptest.NewLogger(t)})
			var merr *ManifestError
			if !errors.As(err, &merr) || merr.Path != env.dirs.ManifestPath() || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want a ManifestError for %s saying %q", err, env.dirs.ManifestPath(), tt.want)
			}
			var verr *policy.ValidationError
			if errors.As(err, &verr) != tt.invalid {
				t.Fatalf("Run = %v: ValidationError %v, want %v", err, !tt.invalid, tt.invalid)
			}
			if _, err := os.Stat(env.dirs.ControlSocket()); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a socket exists although the daemon refused to start: %v", err)
			}
		})
	}
}

func TestListenUnix(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "octosup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "control.sock")
	ln, err := listenUnix(ctx, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	wantNoDescriptors(t, path)
	// A second daemon finds the first one alive and leaves its socket.
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if _, err := listenUnix(ctx, path, true); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second listen = %v, want ErrAlreadyRunning", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the live daemon's socket was removed: %v", err)
	}
	// A daemon that died left its socket: it is replaced.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	again, err := listenUnix(ctx, path, true)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	again.Close()
}

// wantNoDescriptors: a client of the control socket at path cannot hand
// the daemon a descriptor (internal/passrights): the kernel refuses the
// message at once, before the daemon accepts the connection.
func wantNoDescriptors(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(fd, []byte("\n"), unix.UnixRights(0), nil, 0); err != unix.EPERM {
		t.Errorf("a descriptor sent to the control socket: %v, want EPERM", err)
	}
}

// TestRunNotify: the datagrams systemd gets, in order.
func TestRunNotify(t *testing.T) {
	env := newTestEnv(t)
	env.installManifest(t, "two-apps.json")
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))

	d := startDaemon(t, env)
	read := func() string {
		t.Helper()
		got, ok := d.next(10 * time.Second)
		if !ok {
			t.Fatal("no datagram within 10s")
		}
		return got
	}
	if got, want := d.ready, "READY=1\nSTATUS=2 apps: 1 running, 1 stopped"; got != want {
		t.Fatalf("first datagram %q, want %q", got, want)
	}
	for got := read(); got != "WATCHDOG=1"; got = read() {
		if !strings.HasPrefix(got, "STATUS=") {
			t.Fatalf("before the first WATCHDOG=1: %q", got)
		}
	}
	// A state change updates STATUS=.
	if err := d.client.Do(context.Background(), control.OpStart, control.AppArgs{App: "idle"}, nil); err != nil {
		t.Fatal(err)
	}
	for got := read(); got != "STATUS=2 apps: 2 running"; got = read() {
		if got != "WATCHDOG=1" && !strings.HasPrefix(got, "STATUS=") {
			t.Fatalf("waiting for the new STATUS=: %q", got)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- d.stop() }()
	for got := read(); got != "STOPPING=1"; got = read() {
		if got != "WATCHDOG=1" && !strings.HasPrefix(got, "STATUS=") {
			t.Fatalf("waiting for STOPPING=1: %q", got)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestSocketActivation runs the daemon as its own process with the
// socket passed the way systemd passes it (fd 3, LISTEN_FDS=1,
// LISTEN_PID of the daemon itself).
func TestSocketActivation(t *testing.T) {
	env := newTestEnv(t)
	env.installManifest(t, "two-apps.json")
	sockPath := filepath.Join(t.TempDir(), "activated.sock")
	ln, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// sh sets LISTEN_PID to its own pid, which exec hands to the daemon.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0"`, exe)
	cmd.ExtraFiles = []*os.File{f}
	exited, stderr := startDaemonProcess(t, env, cmd)

	c := &control.Client{Path: sockPath}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d control.StatusData
	if err := c.Do(ctx, control.OpStatus, nil, &d); err != nil {
		t.Fatalf("status on the activated socket: %v\n%s", err, stderr.String())
	}
	if len(d.Apps) != 2 {
		t.Fatalf("status: %+v", d)
	}
	if _, err := os.Stat(env.dirs.ControlSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon listened on its own socket too: %v", err)
	}
	wantNoDescriptors(t, sockPath)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("daemon exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not stop on SIGTERM\n%s", stderr.String())
	}
}

// BenchmarkStatusSupervisor is status over the socket with 100 jailed
// apps running under the real supervisor.
func BenchmarkStatusSupervisor(b *testing.B) {
	env := newTestEnv(b)
	var apps []string
	for i := range 100 {
		apps = append(apps, fmt.Sprintf(`{"id":"app-%d","exec":["/bin/sleep","600"],"autostart":true,"grants":{},"sandbox":{"policy":"jail","network":"none","processes":false},"storage":{}}`, i))
	}
	env.writeManifest(b, []byte(`{"version":1,"apps":[`+strings.Join(apps, ",")+`]}`))
	d := startDaemon(b, env)
	ctx := context.Background()
	conn, err := d.client.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var st control.StatusData
	for b.Loop() {
		if err := conn.Do(ctx, control.OpStatus, nil, &st); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	running := 0
	for _, a := range st.Apps {
		if a.State == "running" {
			running++
		}
	}
	if running != 100 {
		b.Fatalf("%d of 100 apps running", running)
	}
}

// testLogger logs to the test, except in benchmarks, where logging would
// be what is measured.
func testLogger(t testing.TB) *zap.Logger {
	if _, ok := t.(*testing.B); ok {
		return zap.NewNop()
	}
	return zaptest.NewLogger(t)
}

func TestListenUnixRefusesAForeignDirectory(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory owned by another uid")
	}
	dir := filepath.Join(t.TempDir(), "octosup")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := listenUnix(context.Background(), filepath.Join(dir, "control.sock"), true)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, not to this user (uid 0)") {
		t.Fatalf("listen in a directory of uid 65534: %v", err)
	}
}

// TestListenUnixPrivateDir: the control socket's directory is this
// user's alone, or the daemon does not listen in it.
func TestListenUnixPrivateDir(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		err   string // "" when it listens
	}{
		{"missing: created 0700", func(*testing.T, string) {}, ""},
		{"readable by others: made private", func(t *testing.T, dir string) { mkdir(t, dir, 0o755) }, ""},
		{"writable by others", func(t *testing.T, dir string) { mkdir(t, dir, 0o777) }, "others could have put files in it"},
		{"a symlink", func(t *testing.T, dir string) {
			target := dir + ".target"
			mkdir(t, target, 0o700)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, "is not a directory but a symlink"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "octosup")
			c.setup(t, dir)
			ln, err := listenUnix(context.Background(), filepath.Join(dir, "control.sock"), true)
			if c.err != "" {
				if err == nil {
					ln.Close()
					t.Fatalf("listened, want an error with %q", c.err)
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ln.Close()
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("directory %v, %v: want a 0700 directory", fi.Mode(), err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
