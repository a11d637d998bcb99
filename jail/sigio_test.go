package jail

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSigioReachesNoOutsideGroup is a neighbour of the review's process
// group escapes: a pipe whose owner is another process group
// (F_SETOWN with a negative id) and whose signal is chosen (F_SETSIG)
// has the kernel send that signal to the whole group on each write,
// with no kill() for the filter or for Landlock's kill check to see. The
// target here is a stand-in for the daemon's group, a process group of
// the daemon's session. Landlock's signal scoping (ABI 6) checks the
// owner's domain at delivery: the jailed probe's signal must not arrive,
// the same probe outside the jail (the control) must reach it. Both
// launchers.
func TestSigioReachesNoOutsideGroup(t *testing.T) {
	for _, helper := range []bool{false, true} {
		name := map[bool]string{false: "fork", true: "helper"}[helper]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: helper})

			mate, lines := startSigmate(t, h)
			if out := h.runPlain("sigio_group", mate); out != "ok" {
				t.Fatalf("control: %q", out)
			}
			if got := next(t, lines); got != "SIGUSR1" {
				t.Fatalf("control: the group got %q, want SIGUSR1: the control does not show the way", got)
			}

			mate, lines = startSigmate(t, h)
			o := h.runApp(h.probeApp("probe", "sigio_group", mate), nil, nil)
			if o.err != nil || o.out != "ok" {
				t.Fatalf("attempt: %q, %v (every call should pass: only the delivery is refused)", o.out, o.err)
			}
			pid := atoi(mate)
			if err := unix.Kill(pid, unix.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			if got := next(t, lines); got != "SIGUSR2" {
				t.Fatalf("attempt: the group outside the jail got %q first: the jailed app signalled it", got)
			}
		})
	}
}

// startSigmate starts the sigmate probe, outside the jail, leading a
// process group of its own in this process's session, and returns its
// pid and its lines once it is ready.
func startSigmate(t *testing.T, h *harness) (string, <-chan string) {
	t.Helper()
	cmd := exec.Command(h.probe, probeArg, "sigmate")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
	}()
	if got := next(t, lines); got != "ready" {
		t.Fatalf("sigmate: %q", got)
	}
	return strconv.Itoa(cmd.Process.Pid), lines
}

// next is sigmate's next line; it gives up after 30s (a bound on a
// broken run, not a wait for anything).
func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("sigmate ended without a word")
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatal("sigmate said nothing in 30s")
	}
	return ""
}
