package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/internal/rig"
	"octosup/policy"
)

// build compiles the given packages (octosup import paths) into a
// temporary directory and returns it: the tests run the real binaries.
func build(t testing.TB, cgo bool, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	// The go that runs the test builds the binaries: a build that fails
	// (an unreadable module cache included) is a failure, never a skip
	// that would hide a regression.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build the binaries with: %v", err)
	}
	args := append([]string{"build", "-o", dir + "/"}, pkgs...)
	cmd := exec.Command(goBin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v as uid %d: %v (an unprivileged user needs a module cache of its own: GOMODCACHE)\n%s", pkgs, os.Geteuid(), err, out)
	}
	return dir
}

// TestHubping runs the app as the spawn section does: its hub byte, its
// FIFO byte, and it outlives the closing of its hub until a signal.
func TestHubping(t *testing.T) {
	hubping := filepath.Join(build(t, false, "octosup/bench/hubping"), "hubping")
	f, err := newFIFO(t.TempDir(), "ping")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	logw, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logw.Close()

	c, err := startChild([]string{hubping, f.Path}, logw)
	if err != nil {
		t.Fatal(err)
	}
	hubAt, err := awaitByte(c.hub, 10*time.Second)
	if err != nil {
		t.Fatalf("hub: %v", err)
	}
	fifoAt, err := f.await(10 * time.Second)
	if err != nil {
		t.Fatalf("FIFO: %v", err)
	}
	if fifoAt.Before(hubAt) {
		t.Errorf("the FIFO byte (%v) came before the hub byte (%v)", fifoAt, hubAt)
	}
	// The hub closes, as a daemon without a peer link closes it: the app
	// must stay.
	unix.Close(c.hub)
	pidfd, err := unix.PidfdOpen(c.cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if _, err := awaitByte(pidfd, 300*time.Millisecond); !errors.Is(err, errNoByte) {
		t.Fatalf("hubping ended when its hub closed (%v): a supervisor would see it stop", err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("after SIGTERM: %v, want death by SIGTERM", err)
	}

	// Without a hub it says so and fails.
	out, err := exec.Command(hubping).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not a hub") {
		t.Errorf("without fd 3: %v, %q", err, out)
	}
}

// TestRunSmall runs every section against a real octosupd with small
// counts and checks that each figure was measured. It checks no figure's
// size: performance is never asserted.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs octosupd")
	}
	bin := build(t, true, "octosup/cmd/octosupd")
	// octosupd runs the jail helper next to it, built with cgo as make
	// build builds it (its setup sequence is C).
	helper := filepath.Join(build(t, true, "octosup/cmd/octosup-jail"), "octosup-jail")
	if err := os.Symlink(helper, filepath.Join(bin, "octosup-jail")); err != nil {
		t.Fatal(err)
	}
	// jsonecho and toolapp next to hubping, where the bench looks for them.
	hubping := filepath.Join(build(t, false, "octosup/bench/hubping", "octosup/bench/jsonecho", "octosup/bench/toolapp"), "hubping")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--json", "--bwrap", "none",
		"--octosupd", filepath.Join(bin, "octosupd"), "--hubping", hubping,
		"--spawns", "3", "--kills", "3", "--scale", "2,4", "--status-calls", "3",
		"--calls", "3", "--calls-pipelined", "8", "--requests", "3", "--requests-pipelined", "8", "--inflight", "4", "--rounds", "1"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout.String())
	}
	rows := map[string]Row{}
	for _, s := range rep.Sections {
		if s.Err != "" {
			t.Errorf("section %s: %s", s.Name, s.Err)
		}
		for _, r := range s.Rows {
			rows[r.Key] = r
		}
	}
	for _, key := range []string{"spawn.plain", "spawn.plain.hub", "spawn.broad", "spawn.jail", "spawn.jail-procs", "spawn.jail.answer",
		"spawn.jail-helper", "spawn.jail-procs-helper", "spawn.helper-floor", "crash.event", "crash.waitpid", "scale.0.status", "scale.4.status"} {
		r, ok := rows[key]
		if !ok || r.N != 3 || r.P50 == nil || r.P50.X <= 0 || r.P99.X < r.P50.X {
			t.Errorf("%s: %+v", key, r)
		}
	}
	for _, sec := range []string{"tools", "requests"} {
		for _, v := range []string{"floor", "relay", "real"} {
			for _, k := range []string{"1", "4"} {
				r := rows[sec+"."+v+"."+k]
				if want := map[string]int{"1": 3, "4": 8}[k]; r.N != want || r.P50 == nil || r.P50.X <= 0 || r.Value == nil || r.Value.X <= 0 {
					t.Errorf("%s.%s.%s: %+v", sec, v, k, r)
				}
			}
		}
		for _, key := range []string{".ratio.p50", ".ratio.rate.4", ".ratio.p50.relay", ".ratio.rate.relay.4"} {
			if r := rows[sec+key]; r.Ratio == nil || r.Ratio.X <= 0 {
				t.Errorf("%s%s: %+v", sec, key, r)
			}
		}
		if r := rows[sec+".cpu.real.4"]; r.Value == nil || !strings.Contains(r.Note, "octosupd") {
			t.Errorf("%s.cpu.real.4: %+v", sec, r)
		}
	}
	for _, key := range []string{"tools.ratio.p50.relay", "tools.ratio.rate.relay.4", "requests.ratio.p50.relay"} {
		if rows[key].Goal == nil {
			t.Errorf("%s has no goal: %+v", key, rows[key])
		}
	}
	for _, key := range []string{"spawn.ratio.c/a", "spawn.ratio.c'/a", "crash.ratio"} {
		if r := rows[key]; r.Ratio == nil || r.Ratio.X <= 0 || r.Goal == nil {
			t.Errorf("%s: %+v", key, r)
		}
	}
	if r := rows["spawn.bwrap"]; !strings.HasPrefix(r.Err, "skipped") {
		t.Errorf("spawn.bwrap with --bwrap none: %+v", r)
	}
	for _, key := range []string{"scale.2.rss", "scale.4.threads", "scale.4.goroutines", "scale.4.ready"} {
		if r := rows[key]; r.Value == nil {
			t.Errorf("%s: %+v", key, r)
		}
	}
	if r := rows["scale.0.goroutines"]; r.Value == nil || r.Value.X < 1 {
		t.Errorf("the empty daemon's goroutines: %+v", r)
	}
	if r := rows["scale.4.ready"]; r.Ratio == nil {
		t.Errorf("scale.4.ready is not compared with the spawn section: %+v", r)
	}
}

func TestRunUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"--only", "nope"}, exitUsage, `no section "nope"`},
		{[]string{"--octosupd", "/nonexistent/octosupd"}, exitUsage, "make build"},
		{[]string{"extra"}, exitUsage, "unexpected argument"},
		{[]string{"--list"}, exitOK, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.say) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.say)
		}
	}
}

func TestDaemonManifest(t *testing.T) {
	f := &fifo{Path: "/tmp/x/fifo/jail/ping"}
	ok, err := rig.Manifest(nil)
	if err != nil || !bytes.Contains(ok, []byte(`"apps": []`)) {
		t.Errorf("the empty manifest: %v\n%s", err, ok)
	}
	for _, c := range []struct {
		name    string
		hubping string
		f       *fifo
		wantErr bool
	}{
		{"broad", "/usr/bin/hubping", nil, false},
		{"jail with a FIFO", "/usr/bin/hubping", f, false},
		{"relative program", "bin/hubping", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rig.Manifest([]policy.App{
				hubpingApp("one", c.hubping, c.f, jailSandbox(false), true),
				hubpingApp("two", c.hubping, c.f, broadSandbox(), false),
				hubpingApp("three", c.hubping, c.f, jailSandbox(true), false),
			})
			if (err != nil) != c.wantErr {
				t.Errorf("err %v, want an error: %v", err, c.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "refuses") {
				t.Errorf("the error does not say octosup refuses it: %v", err)
			}
		})
	}
}
