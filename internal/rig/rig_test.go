package rig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"octosup/policy"
)

// TestMain runs this test binary as a fake octosupd when RIG_TEST_DAEMON
// says how it behaves: the rig is tested against a real process, a
// notify socket and signals, without building the daemon (chaos/ and
// bench/ run the real one through it).
func TestMain(m *testing.M) {
	if mode := os.Getenv("RIG_TEST_DAEMON"); mode != "" {
		os.Exit(fakeDaemon(mode))
	}
	os.Exit(m.Run())
}

func fakeDaemon(mode string) int {
	fmt.Printf("args %q\nHOME=%s\nEXTRA=%s\n", os.Args[1:], os.Getenv("HOME"), os.Getenv("RIG_TEST_EXTRA"))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "exit":
		fmt.Println("boom: no manifest for you")
		return 3
	case "silent":
		select {}
	}
	c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// Status lines first, as sd_notify allows: only a READY=1 line counts.
	c.Write([]byte("STATUS=starting apps\nMAINPID=1"))
	c.Write([]byte("STATUS=up\nREADY=1"))
	c.Close()
	if mode == "stubborn" {
		select {}
	}
	<-term
	return 0
}

func newTree(t *testing.T) *Tree {
	t.Helper()
	tr, err := NewTree(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestStart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode    string
		cancel  bool
		timeout time.Duration
		wantErr string // "" for a daemon that said READY=1
	}{
		// The timeouts leave a loaded machine time to start the fake,
		// but for the one that is waited out.
		{mode: "ready", timeout: time.Minute},
		{mode: "exit", timeout: time.Minute, wantErr: "exited (exit status 3)"},
		{mode: "silent", timeout: 500 * time.Millisecond, wantErr: "did not say READY=1 within 500ms"},
		{mode: "silent", timeout: time.Minute, cancel: true, wantErr: context.Canceled.Error()},
	} {
		t.Run(fmt.Sprintf("%s/cancel=%v", c.mode, c.cancel), func(t *testing.T) {
			tr := newTree(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				cancel()
			}
			d, err := Start(ctx, exe, tr, Options{Name: "1", Args: []string{"--x"}, Timeout: c.timeout,
				Env: []string{"RIG_TEST_DAEMON=" + c.mode, "RIG_TEST_EXTRA=yes"}})
			if c.wantErr != "" {
				if err == nil {
					d.Kill()
					t.Fatalf("Start succeeded, want an error saying %q", c.wantErr)
				}
				if !strings.Contains(err.Error(), c.wantErr) || !(strings.Contains(err.Error(), "its log") || strings.Contains(err.Error(), "it logged nothing")) {
					t.Fatalf("Start: %v; want it to say %q and how the log ends", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Ready <= 0 {
				t.Errorf("Ready = %v, want the time to READY=1", d.Ready)
			}
			if err := d.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			<-d.Exited()
			if d.LogPath() != filepath.Join(tr.Dir, "octosupd-1.log") {
				t.Errorf("LogPath = %s, want octosupd-1.log in the tree", d.LogPath())
			}
			log := d.LogTail(10)
			for _, want := range []string{
				fmt.Sprintf("%q", []string{"run", "--config", tr.Manifest, "--x"}),
				"HOME=" + filepath.Join(tr.Dir, "home"),
				"EXTRA=yes",
			} {
				if !strings.Contains(log, want) {
					t.Errorf("the fake daemon did not see %s: %s", want, log)
				}
			}
		})
	}
}

// A daemon that ignores SIGTERM is killed after the grace, and Stop says so.
func TestStopKillsAfterGrace(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(context.Background(), exe, newTree(t), Options{Timeout: time.Minute, Env: []string{"RIG_TEST_DAEMON=stubborn"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop of a daemon that ignores SIGTERM: %v, want it killed", err)
	}
	select {
	case <-d.Exited():
	default:
		t.Fatal("Stop returned before the daemon was reaped")
	}
	d.Kill() // on a reaped daemon: nothing
	if err := d.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after the end: %v, want os.ErrProcessDone", err)
	}
}

func TestStartNeedsTimeout(t *testing.T) {
	if _, err := Start(context.Background(), "/nonexistent/octosupd", newTree(t), Options{}); err == nil || !strings.Contains(err.Error(), "Timeout") {
		t.Fatalf("Start without a timeout: %v, want an error naming Options.Timeout", err)
	}
}

func TestNewTree(t *testing.T) {
	dir := t.TempDir()
	tr, err := NewTree(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tr.Manifest)
	if err != nil || !strings.Contains(string(b), `"apps": []`) {
		t.Errorf("the empty manifest: %v\n%s", err, b)
	}
	if !strings.HasPrefix(tr.Socket, filepath.Join(dir, "run")+"/") {
		t.Errorf("Socket %s is not under the tree's XDG_RUNTIME_DIR", tr.Socket)
	}
	for _, sub := range []string{"home", "run", "state", "data", "config"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", sub, fi, err)
		}
	}
	_, err = NewTree(t.TempDir(), []policy.App{{ID: "x", Exec: []string{"relative/bin"}}})
	if err == nil || !strings.Contains(err.Error(), "refuses") {
		t.Errorf("a manifest octosup refuses: %v, want an error saying so", err)
	}
}
