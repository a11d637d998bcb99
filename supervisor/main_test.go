package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"octosup/jail"
	"octosup/policy"
)

// The test binary is also every app the tests run, and the "daemon" of the
// SIGKILL test: TestMain switches on modeEnv before running any test.
const (
	modeEnv  = "SUPTEST_MODE"
	linesEnv = "SUPTEST_LINES"
	longEnv  = "SUPTEST_LONG"
)

func TestMain(m *testing.M) {
	if jail.IsHelper(os.Args) {
		os.Exit(jail.RunHelper())
	}
	if mode := os.Getenv(modeEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// child is the test binary run as an app (or as a daemon).
func child(mode string) int {
	switch mode {
	case "sleep":
		fmt.Println("ready")
		sleepForever()
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		sleepForever()
	case "grandchild", "setsid-grandchild":
		// A helper in the app's own process group that ignores SIGTERM:
		// only the group SIGKILL can end it. Its pid is printed only once
		// it has said, over a pipe, that it ignores SIGTERM. The setsid
		// one leaves the group (and the session) first: only the app's
		// cgroup still holds it.
		gcMode := "ignoreterm-fd3"
		if mode == "setsid-grandchild" {
			gcMode = "setsid-fd3"
		}
		pid, err := startReady(gcMode)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("grandchild", pid)
		sleepForever()
	case "ignoreterm-fd3", "setsid-fd3":
		if mode == "setsid-fd3" {
			if _, err := syscall.Setsid(); err != nil {
				return 1
			}
		}
		signal.Ignore(syscall.SIGTERM)
		ready := os.NewFile(3, "ready")
		_, _ = ready.WriteString("ready")
		ready.Close()
		sleepForever()
	case "lines":
		n, _ := strconv.Atoi(os.Getenv(linesEnv))
		for i := range n {
			fmt.Printf("line %d\n", i)
		}
		if l, _ := strconv.Atoi(os.Getenv(longEnv)); l > 0 {
			fmt.Println(strings.Repeat("x", l))
		}
		return 0
	case "exit3":
		fmt.Fprintln(os.Stderr, "exiting with 3")
		return 3
	case "orphan", "orphan-child", "orphan-grandchild", "regroup", "regroup-child", "termtree", "termtree-child":
		return escapeChild(mode)
	case "daemon":
		return daemon()
	case "forkbomb":
		return forkBomb()
	case "spin":
		return spin()
	case "hog":
		return memoryHog()
	case "zombie-leader":
		return zombieLeader()
	case "pass-fd":
		return passFD()
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

// startReady starts this binary in mode, with a pipe as its fd 3, and
// returns its pid once it wrote "ready" there and closed it.
func startReady(mode string) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), modeEnv+"="+mode)
	c.ExtraFiles = []*os.File{w}
	err = c.Start()
	w.Close()
	if err != nil {
		return 0, err
	}
	if msg, err := io.ReadAll(r); err != nil || string(msg) != "ready" {
		return 0, fmt.Errorf("the %s child said %q (%v)", mode, msg, err)
	}
	return c.Process.Pid, nil
}

// daemon runs a supervisor with two sleeping apps, prints their pids and
// waits to be killed.
func daemon() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	sup, err := New(Config{Launcher: jail.NewLauncher(jail.Config{}), Log: zap.NewNop(), BaseEnv: os.Environ()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go func() { _ = sup.Run(context.Background()) }()
	m := &policy.Manifest{Version: 1, Apps: []policy.App{
		testApp(exe, "one", "sleep", true), testApp(exe, "two", "sleep", true),
	}}
	if _, err := sup.Apply(context.Background(), m, ApplyOptions{}); err != nil {
		fmt.Println("error", err)
		return 1
	}
	st, _ := sup.Status("")
	w := bufio.NewWriter(os.Stdout)
	for _, a := range st {
		fmt.Fprintln(w, "pid", a.ID, a.State, a.Pid)
	}
	w.Flush()
	sleepForever()
	return 0
}

// testApp is a manifest entry that runs the test binary in mode. It uses
// the broad policy: these tests are about the lifecycle, not the jail.
func testApp(exe, id, mode string, autostart bool) policy.App {
	return policy.App{
		ID:        id,
		Exec:      []string{exe},
		Autostart: autostart,
		Restart:   policy.RestartOnRequest,
		Sandbox:   policy.Sandbox{Policy: policy.PolicyBroad, Network: policy.NetworkFull},
		// The race detector sleeps 1s at exit by default; the apps need not.
		Env: map[string]string{modeEnv: mode, "GORACE": "atexit_sleep_ms=0"},
	}
}
