package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"octosup/control"
)

// topApps are the apps of the top tests at read n (from 0): notes and
// clock run and use CPU (25% and 90% of one between reads), sync is
// stopped, term restarted between the reads (another pid: its CPU is not
// known), and a hostile id is shown escaped.
func topApps(n int) []control.AppStatus {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := t0.Add(time.Duration(n) * time.Second)
	usec := func(base, perRead uint64) uint64 { return base + uint64(n)*perRead }
	return []control.AppStatus{
		{ID: "notes", State: "running", Pid: 100, Link: control.LinkStatus{Connected: true, OutstandingCalls: 2},
			Usage: &control.Usage{CPUUsec: usec(1_000_000, 250_000), MemoryCurrent: 50 << 20, MemoryPeak: 60 << 20, Tasks: 12, At: at}},
		{ID: "clock", State: "running", Pid: 200,
			Usage: &control.Usage{CPUUsec: usec(500_000, 900_000), MemoryRSS: 3355443, Tasks: 3, At: at}},
		{ID: "sync", State: "stopped", LastExit: &control.Exit{Code: 0, OOM: "memory_max 512M"}},
		{ID: "term", State: "running", Pid: 300 + n,
			Usage: &control.Usage{CPUUsec: 10_000, MemoryCurrent: 1200 << 20, Tasks: 40, At: at}},
		{ID: "evil\x1b[2J", State: "running", Pid: 400,
			Usage: &control.Usage{CPUUsec: usec(0, 1000), MemoryRSS: 900 << 10, Tasks: 1, At: at}},
	}
}

// topDaemon is a fake daemon whose status answers are topApps(0), (1), …
// in turn, with two pending approvals of notes and an answered one.
func topDaemon(t *testing.T) string {
	var mu sync.Mutex
	reads := 0
	return fakeDaemon(t, func(op string, _ json.RawMessage, _ bool) (any, *control.Error, []fakeEvent) {
		switch op {
		case control.OpStatus:
			mu.Lock()
			n := reads
			reads++
			mu.Unlock()
			return control.StatusData{Apps: topApps(n)}, nil, nil
		case control.OpApprovals:
			return control.ApprovalsData{Approvals: []control.Approval{
				{ApprovalID: "a1", App: "notes", State: "pending"},
				{ApprovalID: "a2", App: "notes", State: "pending"},
				{ApprovalID: "a3", App: "clock", State: "allowed"},
			}}, nil, nil
		}
		return nil, control.Errorf(control.CodeUnknownOp, "no op %s", op), nil
	})
}

// TestTopOnce: top --once prints one frame from two reads, sorted as
// asked; the frames are golden files (go test -update rewrites them).
func TestTopOnce(t *testing.T) {
	for _, sortBy := range []string{"cpu", "mem", "tasks", "app"} {
		t.Run(sortBy, func(t *testing.T) {
			socket := topDaemon(t)
			r := ctl(t, "--socket", socket, "top", "--once", "--interval", "1ms", "--sort", sortBy)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			golden(t, filepath.Join("testdata", "top-once-"+sortBy+".golden"), r.stdout)
		})
	}
}

func TestTopUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"top", "--sort", "pid"}, `top --sort "pid": want cpu, mem, tasks or app`},
		{[]string{"top", "--interval", "0s"}, `top --interval 0s: want a positive duration`},
		// Not a terminal (the test's buffers): a word, not bubbletea's
		// epoll error and escape codes.
		{[]string{"top"}, `top: the live view needs a terminal (stdin and stdout); use top --once for one frame, or top --once --json`},
		{[]string{"--json", "top"}, `top --json needs --once`},
	} {
		r := ctl(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.err) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.err)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if r := ctl(t, "--socket", missing, "top", "--once"); r.code != exitNotRunning {
		t.Errorf("no daemon: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestTopOnceJSON: top --once --json prints the frame's figures as JSON,
// sorted as asked, not the table.
func TestTopOnceJSON(t *testing.T) {
	socket := topDaemon(t)
	r := ctl(t, "--socket", socket, "--json", "top", "--once", "--interval", "1ms", "--sort", "app")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var rows []topJSON
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if len(rows) == 0 || !slices.IsSortedFunc(rows, func(a, b topJSON) int { return strings.Compare(a.App, b.App) }) {
		t.Fatalf("rows %+v: want the apps, by id", rows)
	}
}

// TestTopFrameWidth: the live view cuts its lines to the terminal's width.
func TestTopFrameWidth(t *testing.T) {
	rows := topRows(topSample{apps: topApps(0)}, topSample{apps: topApps(1)})
	for line := range strings.SplitSeq(renderTop(rows, "cpu", 30, "q quit"), "\n") {
		if len(line) > 30 {
			t.Errorf("line of %d cells in a 30-cell view: %q", len(line), line)
		}
	}
}

// TestTopInteractive drives the live view as a person would: in a tmux
// terminal, it reads the screen, types m to sort by memory and q to quit.
func TestTopInteractive(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not installed (apt-get install tmux)")
	}
	socket := topDaemon(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf("octosup-top-%d", os.Getpid())
	run := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", server}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { run("kill-server") })
	cmd := fmt.Sprintf("env %s=1 %s --socket %s top --interval 50ms", asMainEnv, exe, socket)
	if out, err := run("new-session", "-d", "-s", "top", "-x", "100", "-y", "20", cmd); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	screen := func(ok func(string) bool, what string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := run("capture-pane", "-p", "-t", "top")
			if err == nil && ok(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %s:\n%s", what, out)
			}
			time.Sleep(20 * time.Millisecond) // a terminal is read by looking again
		}
	}
	first := func(s string) string { // the app of the first line under the header
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "APP ") && i+1 < len(lines) {
				return strings.Fields(lines[i+1])[0]
			}
		}
		return ""
	}
	s := screen(func(s string) bool { return strings.Contains(s, "by cpu") && first(s) == "clock" }, "the apps by CPU, clock first")
	if !strings.Contains(s, "q quit") || !strings.Contains(s, "notes") {
		t.Fatalf("the live view:\n%s", s)
	}
	if out, err := run("send-keys", "-t", "top", "m"); err != nil {
		t.Fatalf("send-keys: %v: %s", err, out)
	}
	screen(func(s string) bool { return strings.Contains(s, "by mem") && first(s) == "term" }, "the apps by memory, term first")
	if out, err := run("send-keys", "-t", "top", "q"); err != nil {
		t.Fatalf("send-keys: %v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := run("has-session", "-t", "top"); err != nil {
			break // top quit, and its session with it
		}
		if time.Now().After(deadline) {
			out, _ := run("capture-pane", "-p", "-t", "top")
			t.Fatalf("top did not quit on q:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWarningLine: watch prints a limit warning as what it is, not as a
// move of the app's state.
func TestWarningLine(t *testing.T) {
	st := control.StateEvent{App: "bomb", State: "running", Pid: 7, Since: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC),
		Warning: "tasks_max reached (512): the app's forks and new threads fail"}
	got := stateLine(st)
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d bomb warning: tasks_max reached \(512\): the app's forks and new threads fail$`).MatchString(got) {
		t.Errorf("warning line %q", got)
	}
	st.Warning = ""
	if got := stateLine(st); !strings.HasSuffix(got, " bomb running (pid 7)") {
		t.Errorf("state line %q", got)
	}
}
