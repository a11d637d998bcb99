package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestChaosShort is make chaos in small: a real octosupd and a dozen
// jailed apps, a 15-second storm, the SIGKILL and the restart. It asserts
// only the invariants, never a time. CHAOS_SEED replays a seed.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos pass runs a real daemon for ~30s: skipped under -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build octosupd and the chaos app")
	}
	bin := t.TempDir()
	build := func(env []string, out string, pkgs ...string) {
		t.Helper()
		cmd := exec.Command(goBin, append([]string{"build", "-o", out}, pkgs...)...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", pkgs, err, b)
		}
	}
	build([]string{"CGO_ENABLED=1"}, bin+"/", "./cmd/octosupd")
	if _, err := os.Stat("../cmd/octosup-jail"); err == nil {
		// The jail helper octosupd runs between fork and exec sits next
		// to it (make build).
		build([]string{"CGO_ENABLED=1"}, bin+"/", "./cmd/octosup-jail") // the setup sequence is C (jail/spawn)
	}
	app := filepath.Join(bin, "chaos-app")
	build([]string{"CGO_ENABLED=0"}, app, "./chaos/app")

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay: CHAOS_SEED=%d go test -run TestChaosShort ./chaos)", seed, seed)
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := run(ctx, config{
		Octosupd:    filepath.Join(bin, "octosupd"),
		App:         app,
		Dir:         t.TempDir(),
		Duration:    15 * time.Second,
		Apps:        12,
		Workers:     4,
		Seed:        seed,
		MaxDeadline: 2 * time.Second,
		Progress:    &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("the chaos run could not be made: %v\n%s", err, res.Report)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("seed %d: %d invariant violation(s):\n%s", seed, len(res.Violations), res.Report)
	}
	t.Logf("report:\n%s", res.Report)
}

func TestParentOf(t *testing.T) {
	ppid, err := parentOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ppid != os.Getppid() {
		t.Fatalf("parentOf(self) = %d, want %d", ppid, os.Getppid())
	}
	if _, err := parentOf(1 << 30); err == nil {
		t.Fatal("parentOf(a pid that cannot exist) did not fail")
	}
}

// The tracker must see through a process that has gone: Survivors names
// only those still alive.
func TestProcsSurvivors(t *testing.T) {
	p := newProcs()
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Skipf("no sleep(1): %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if !p.Track(cmd.Process.Pid, "x", os.Getpid()) {
			t.Fatalf("Track of our own child %d failed", cmd.Process.Pid)
		}
		return cmd
	}
	dies, lives := start(), start()
	if p.Track(lives.Process.Pid, "x", os.Getpid()+1) {
		t.Fatal("Track took a process whose parent is not the daemon")
	}
	dies.Process.Kill()
	dies.Wait()
	checked, alive := p.Survivors(os.Getpid(), 2*time.Second)
	if checked != 2 || len(alive) != 1 || !bytes.Contains([]byte(alive[0]), []byte(strconv.Itoa(lives.Process.Pid))) {
		t.Fatalf("Survivors = %d, %q; want 2 checked, only pid %d alive", checked, alive, lives.Process.Pid)
	}
	p.Release(os.Getpid())
}
