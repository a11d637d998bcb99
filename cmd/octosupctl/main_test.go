package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"octosup/control"
	"octosup/daemon"
	"octosup/jail"
	"octosup/policy"
)

// asMainEnv makes the test binary octosupctl itself, for the tests that
// run it in a terminal (top_test.go).
const asMainEnv = "OCTOSUPCTL_TEST_MAIN"

func TestMain(m *testing.M) {
	// The daemon these tests run re-executes the test binary as the jail
	// helper.
	if jail.IsHelper(os.Args) {
		os.Exit(jail.RunHelper())
	}
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// A table's width is the test's to set (TestFailedAppReason), not the
	// shell's that runs go test.
	os.Unsetenv("COLUMNS")
	goleak.VerifyTestMain(m)
}

type result struct {
	code           int
	stdout, stderr string
}

func ctl(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func TestWithoutDaemon(t *testing.T) {
	// "validate home" needs octosup's directories in the home: the
	// user's own XDG variables may put them anywhere.
	home := filepath.Join(t.TempDir(), "home")
	t.Setenv("HOME", home)
	for k, v := range map[string]string{"XDG_CONFIG_HOME": ".config", "XDG_STATE_HOME": ".local/state", "XDG_DATA_HOME": ".local/share"} {
		t.Setenv(k, filepath.Join(home, v))
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // regexp
		wantStderr string // regexp
	}{
		// It names the socket it tried: a wrong --socket or
		// XDG_RUNTIME_DIR shows.
		{"not running", []string{"--socket", missing, "status"}, exitNotRunning, `^$`,
			"^octosupctl: octosupd is not running: nothing listens at " + regexp.QuoteMeta(missing) + "; start it with `systemctl --user start octosupd` \\(or `make run` in a checkout\\)\n$"},
		{"not running start", []string{"--socket", missing, "start", "x"}, exitNotRunning, `^$`, `octosupd is not running`},
		{"unknown command", []string{"frobnicate"}, exitUsage, `^$`, `^octosupctl: unknown command "frobnicate".*\n$`},
		{"missing app", []string{"stop"}, exitUsage, `^$`, `^octosupctl: stop: name one APP \(octosupctl stop APP\); got none \(see octosupctl --help\)\n$`},
		{"suggestion", []string{"statsu"}, exitUsage, `^$`, `^octosupctl: unknown command "statsu" for "octosupctl"; did you mean status\?\n$`},
		{"json failure", []string{"--json", "--socket", missing, "status"}, exitNotRunning, `^\{"ok":false,"error":\{"exit_code":3,"message":"octosupd is not running: [^\n]*","detail":\[\]\}\}\n$`, `octosupd is not running`},
		{"json usage failure", []string{"--json", "stop"}, exitUsage, `^\{"ok":false,"error":\{"exit_code":2,"message":"stop: name one APP`, `name one APP`},
		{"bad flag", []string{"status", "--bogus"}, exitUsage, `^$`, `unknown flag: --bogus`},
		{"bad -n", []string{"logs", "x", "-n", "many"}, exitUsage, `^$`, `invalid argument "many"`},
		{"validate good", []string{"validate", "testdata/apps.json"}, exitOK, `^testdata/apps.json is valid: 2 apps\n$`, `^$`},
		{"validate bad", []string{"validate", "testdata/bad.json"}, exitInvalid, `^$`,
			`(?s)^octosupctl: testdata/bad.json is invalid: \d+ problem\(s\)\n(  app #0: [^\n]+\n){4,}$`},
		{"validate bad json", []string{"--json", "validate", "testdata/bad.json"}, exitInvalid, `"valid": false`, `is invalid`},
		// The whole home holds octosup's own directories.
		{"validate home", []string{"validate", "testdata/home.json"}, exitInvalid, `^$`,
			`(?s)^octosup[^\n]*is invalid: 1 problem\(s\)\n  app "files": sandbox.external\[0\].path: "[^"]+" overlaps octosup's own configuration directory`},
		{"validate missing", []string{"validate", "testdata/none.json"}, exitFailed, `^$`, `^octosupctl: validate: no file testdata/none.json\n$`},
		{"completion", []string{"completion", "bash"}, exitOK, `octosupctl`, `^$`},
		{"completion unknown shell", []string{"completion", "tcsh"}, exitUsage, `^$`, `^octosupctl: completion: no completion for "tcsh": bash, zsh, fish or powershell\n$`},
		{"jail not running", []string{"--socket", missing, "jail", "x"}, exitNotRunning, `^$`, `octosupd is not running`},
		{"jail no app", []string{"jail"}, exitUsage, `^$`, `jail: name one APP`},
		{"version", []string{"--version"}, exitOK, `^octosupctl version \S+`, `^$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ctl(t, tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, tt.wantCode, r.stderr)
			}
			if !regexp.MustCompile(tt.wantStdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", truncate(r.stdout), tt.wantStdout)
			}
			if !regexp.MustCompile(tt.wantStderr).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, tt.wantStderr)
			}
		})
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// startDaemon runs octosupd in-process on the given manifest, in a
// private home, and returns its socket.
func startDaemon(t *testing.T, manifest string) (socket, manifestPath string) {
	t.Helper()
	root := t.TempDir()
	env := map[string]string{
		"HOME":            filepath.Join(root, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(root, "run"),
		"XDG_CONFIG_HOME": filepath.Join(root, "config"),
		"XDG_STATE_HOME":  filepath.Join(root, "state"),
		"XDG_DATA_HOME":   filepath.Join(root, "data"),
	}
	manifestPath = filepath.Join(root, "native-apps.json")
	copyFile(t, manifest, manifestPath)
	socket = filepath.Join(env["XDG_RUNTIME_DIR"], "octosup", "control.sock")
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{
			ManifestPath: manifestPath,
			Getenv:       func(k string) string { return env[k] },
			Environ:      []string{"PATH=/usr/bin:/bin"},
			Log:          zaptest.NewLogger(t),
			StopGrace:    time.Second,
			// The socket listens once Setup runs: requests wait in its
			// backlog until they are served.
			Setup: func(context.Context, *daemon.Server, daemon.Apps) error { close(listening); return nil },
		})
	}()
	select {
	case <-listening:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	// Setup runs before the daemon applies the manifest, and applying one
	// whose apps do not autostart publishes no event: poll status, bounded,
	// until it lists them.
	m, err := policy.Load(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	c := &control.Client{Path: socket}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var data control.StatusData
		err := c.Do(context.Background(), control.OpStatus, control.StatusArgs{}, &data)
		if err == nil && len(data.Apps) == len(m.Apps) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not list the manifest's %d apps within 10s: %v, %+v", len(m.Apps), err, data.Apps)
		}
	}
	return socket, manifestPath
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWithDaemon(t *testing.T) {
	socket, manifest := startDaemon(t, "testdata/apps.json")
	s := []string{"--socket", socket}
	steps := []struct {
		name       string
		args       []string
		before     func()
		wantCode   int
		wantStdout string // regexp
		wantStderr string // regexp
	}{
		{"status", []string{"status"}, nil, exitOK,
			`(?m)^APP\s+STATE\s+PID\s+UPTIME\s+RESTARTS\s+LAST EXIT\s+JAIL\n` +
				`talker\s+stopped\s+-\s+-\s+0\s+-\s+-\n` +
				`idle\s+stopped\s+-\s+-\s+0\s+-\s+-\n$`, `^$`},
		{"start", []string{"start", "talker"}, nil, exitOK, `^talker: running \(pid \d+\)\n$`, `^$`},
		{"status running", []string{"status", "talker"}, nil, exitOK, `(?m)^talker\s+running\s+\d+\s+\d+s\s+0\s+-\s+(landlock \d+, )?seccomp( \(missing [a-z_., ]+\))?(; limits missing: [a-z, ]+)?\n$`, `^$`},
		{"jail", []string{"jail", "talker"}, nil, exitOK,
			`(?s)^app talker\n  program  /bin/sh\n.*  files    read anywhere; write, create and remove only beneath these \(policy broad\):\n.*  syscalls refused[^\n]*:\n    ptrace .*\nlimits \(at the last start\): limiter [a-z+]+\n  (applied: [^\n]*tasks_max=512[^\n]*|applied: none\n  missing: limits\.pids [^\n]*)\n$`, `^$`},
		{"status json running", []string{"--json", "status", "talker"}, nil, exitOK,
			// In a cgroup leaf, usage follows; without one (no cgroup to
			// delegate: prlimit) the app ends with its limits. With no
			// limiter at all a root daemon may still have made a leaf
			// (a cgroup v2 mount without controllers), which counts usage.
			`(?s)"limits": \{\n\s+"limiter": "(cgroup[a-z+]*",\n\s+"applied": \[\n\s+"tasks_max=512[^"]*"\n\s+\],.*"usage": \{\n\s+"cpu_usec": \d+,` +
				`|prlimit",\n\s+"applied": \[\n\s+"tasks_max=512[^"]*"\n\s+\],\n\s+"missing": \[\]\n\s+\}\n\s+\}` +
				`|none",\n\s+"applied": \[\],\n\s+"missing": \[\n\s+"limits\.pids"\n\s+\]\n\s+\}(\n\s+\}|,\n\s+"usage": \{\n\s+"cpu_usec": \d+,))`, `^$`},
		{"jail json", []string{"--json", "jail", "idle"}, nil, exitOK, `(?s)^\{\n  "version": 1,\n  "app": "idle",\n  "program": "/bin/sleep",.*"seccomp": \[`, `^$`},
		{"jail unknown", []string{"jail", "nope"}, nil, exitFailed, `^$`, `^octosupctl: jail nope: the manifest has no such app: status lists those it has\n$`},
		// Every command words an unknown app the same, once.
		{"start unknown", []string{"start", "nope"}, nil, exitFailed, `^$`, `^octosupctl: start nope: the manifest has no such app: status lists those it has\n$`},
		{"restart misspelt", []string{"restart", "talkr"}, nil, exitFailed, `^$`, `^octosupctl: restart talkr: the manifest has no such app: status lists those it has; did you mean talker\?\n$`},
		{"status unknown", []string{"status", "nope"}, nil, exitFailed, `^$`, `^octosupctl: status nope: the manifest has no such app: status lists those it has\n$`},
		{"restart unknown", []string{"restart", "nope"}, nil, exitFailed, `^$`, `^octosupctl: restart nope: the manifest has no such app: status lists those it has\n$`},
		{"stop unknown", []string{"stop", "nope"}, nil, exitFailed, `^$`, `^octosupctl: stop nope: the manifest has no such app: status lists those it has\n$`},
		{"logs unknown", []string{"logs", "nope"}, nil, exitFailed, `^$`, `^octosupctl: logs nope: the manifest has no such app: status lists those it has\n$`},
		{"restart", []string{"restart", "talker"}, nil, exitOK, `^talker: running \(pid \d+\)\n$`, `^$`},
		{"logs", []string{"logs", "talker", "-n", "10"}, nil, exitOK, `hello from talker`, `^$`},
		{"stop", []string{"stop", "talker"}, nil, exitOK, `^talker: stopped \(signal SIGTERM\)\n$`, `^$`},
		{"status after stop", []string{"status"}, nil, exitOK, `(?m)^talker\s+stopped\s+-\s+-\s+1\s+signal SIGTERM, \d+s ago\s`, `^$`},
		{"status json", []string{"--json", "status"}, nil, exitOK, `"apps": \[`, `^$`},
		{"reload bad", []string{"reload"}, func() { copyFile(t, "testdata/bad.json", manifest) }, exitInvalid, `^$`,
			`(?s)^octosupctl: reload refused: the manifest has \d+ problem\(s\); the running apps are unchanged\n(  app #0: [^\n]+\n){4,}$`},
		// reload has no --config: its hint names none, and says reload once.
		{"reload missing", []string{"reload"}, func() { os.Remove(manifest) }, exitFailed, `^$`,
			`^octosupctl: reload: no manifest at ` + regexp.QuoteMeta(manifest) + `: create one \(configs/native-apps.example.json in octosup's source is a start\)\n$`},
		{"reload good", []string{"reload"}, func() { copyFile(t, "testdata/apps.json", manifest) }, exitOK, `^reloaded: 2 apps\n$`, `^$`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			r := ctl(t, append(s, st.args...)...)
			if r.code != st.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, st.wantCode, r.stderr)
			}
			if !regexp.MustCompile(st.wantStdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", truncate(r.stdout), st.wantStdout)
			}
			if !regexp.MustCompile(st.wantStderr).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, st.wantStderr)
			}
		})
	}
}

// streaming runs a command that prints until interrupted, and returns its
// output lines and a function that interrupts it and returns the code.
func streaming(t *testing.T, args ...string) (<-chan string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	lines := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	code := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		code <- run(ctx, args, pw, &errOut)
		pw.Close()
	}()
	stop := func() int {
		cancel()
		c := <-code
		wg.Wait()
		if errOut.Len() > 0 {
			t.Errorf("stderr: %s", errOut.String())
		}
		return c
	}
	t.Cleanup(func() { cancel() })
	return lines, stop
}

func waitLine(t *testing.T, lines <-chan string, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line matching %q", re)
			}
			if rx.MatchString(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line matching %q within 10s", re)
		}
	}
}

// linesUntil returns the lines before the first that matches re.
func linesUntil(t *testing.T, lines <-chan string, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(10 * time.Second)
	var before []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line matching %q (after %q)", re, before)
			}
			if rx.MatchString(l) {
				return before
			}
			before = append(before, l)
		case <-timeout:
			t.Fatalf("no line matching %q within 10s (after %q)", re, before)
		}
	}
}

func TestWatchAndFollow(t *testing.T) {
	socket, _ := startDaemon(t, "testdata/apps.json")
	sock := []string{"--socket", socket}

	// watch prints where each app is (which also says it is subscribed),
	// then the changes.
	watch, stopWatch := streaming(t, append(sock, "watch")...)
	waitLine(t, watch, `^\d\d:\d\d:\d\d talker stopped$`)
	waitLine(t, watch, `^\d\d:\d\d:\d\d idle stopped$`)
	if r := ctl(t, append(sock, "start", "talker")...); r.code != exitOK {
		t.Fatalf("start: %+v", r)
	}
	waitLine(t, watch, `^\d\d:\d\d:\d\d talker running \(pid \d+\)$`)

	// logs -f prints the last lines (the first hello), then new ones (the
	// hello of the restarted process).
	follow, stopFollow := streaming(t, append(sock, "logs", "-f", "talker")...)
	waitLine(t, follow, `^\d\d:\d\d:\d\d\.\d{3} hello from talker$`)
	if r := ctl(t, append(sock, "restart", "talker")...); r.code != exitOK {
		t.Fatalf("restart: %+v", r)
	}
	waitLine(t, follow, `^\d\d:\d\d:\d\d\.\d{3} hello from talker$`)
	waitLine(t, watch, `^\d\d:\d\d:\d\d talker stopped \(signal SIGTERM\)$`)
	// One line a change of state: the daemon also reports a starting
	// app's pid once it has one, which is no news to a person.
	between := linesUntil(t, watch, `^\d\d:\d\d:\d\d talker running \(pid \d+\)$`)
	if len(between) != 1 || !regexp.MustCompile(`^\d\d:\d\d:\d\d talker starting$`).MatchString(between[0]) {
		t.Errorf("watch between stopped and running: %q, want one starting line", between)
	}
	if code := stopWatch(); code != exitOK {
		t.Errorf("watch exit %d after an interrupt, want 0", code)
	}
	if code := stopFollow(); code != exitOK {
		t.Errorf("logs -f exit %d after an interrupt, want 0", code)
	}

	// watch --json prints events as the daemon sends them.
	jw, stopJW := streaming(t, append(sock, "--json", "watch")...)
	waitLine(t, jw, `"app":"idle","state":"stopped"`)
	if r := ctl(t, append(sock, "start", "idle")...); r.code != exitOK {
		t.Fatalf("start idle: %+v", r)
	}
	l := waitLine(t, jw, `"app":"idle","state":"running"`)
	var ev control.StateEvent
	if err := json.Unmarshal([]byte(l), &ev); err != nil || !strings.HasPrefix(l, `{"event":"state",`) || ev.Pid == 0 {
		t.Fatalf("--json watch line %q: %v", l, err)
	}
	stopJW()
}

// TestDaemonHangsUp: a daemon that closes the connection before it
// answers is said once, with what to do (it printed "status: status:
// read unix …: connection reset by peer").
func TestDaemonHangsUp(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			c.Close()
		}
	}()
	r := ctl(t, "--socket", socket, "status")
	want := "octosupctl: status: octosupd closed the connection before it answered (it may have stopped or restarted): check `systemctl --user status octosupd`, then try again\n"
	if r.code != exitFailed || r.stderr != want {
		t.Fatalf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitFailed, want)
	}
}
