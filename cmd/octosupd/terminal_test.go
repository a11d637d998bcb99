package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPty returns a pseudo-terminal's two ends: what octosupd writes to
// the second, the test reads from the first.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Skipf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("name the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	return m, s
}

// TestTerminalLog: on a terminal, what an app writes is one short human
// line each (time, app, text, shown visibly), not a log record with its
// fields; the daemon's own lines stay.
func TestTerminalLog(t *testing.T) {
	master, slave := openPty(t)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"HOME": filepath.Join(dir, "home"), "XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
		"XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_STATE_HOME": filepath.Join(dir, "state"),
		"XDG_DATA_HOME": filepath.Join(dir, "data"),
	} {
		t.Setenv(k, v)
	}
	manifest := filepath.Join(dir, "apps.json")
	app := `printf 'hello from talker\n'; printf 'oops \033[2J\n' >&2; exec sleep 600`
	m := fmt.Sprintf(`{"version": 1, "apps": [{"id": "talker", "exec": ["/bin/sh", "-c", %q], "autostart": true,
	  "grants": {}, "sandbox": {"policy": "broad"}, "storage": {}}]}`, app)
	if err := os.WriteFile(manifest, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}

	lines := make(chan string, 100)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSuffix(sc.Text(), "\r"):
			default: // the test has what it needs
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", manifest}, slave) }()

	var got []string
	want := []*regexp.Regexp{
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} talker: hello from talker$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} talker \[stderr\]: oops \\x1b\[2J$`),
		// The daemon's own line, which the app's may come before: its
		// output is read while the runner logs the start.
		regexp.MustCompile(`app started`),
	}
	seen := make([]bool, len(want))
	timeout := time.After(10 * time.Second)
wait:
	for {
		select {
		case l := <-lines:
			got = append(got, l)
			for i, re := range want {
				seen[i] = seen[i] || re.MatchString(l)
			}
			if !slices.Contains(seen, false) {
				break wait
			}
		case code := <-done:
			t.Fatalf("octosupd exited %d:\n%s", code, strings.Join(got, "\n"))
		case <-timeout:
			t.Errorf("no line of the app's within 10s")
			break wait
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("octosupd exit %d", code)
	}
	slave.Close()
	<-read
	master.Close()
	for i, re := range want {
		if !seen[i] {
			t.Errorf("no line matches %s", re)
		}
	}
	for _, l := range got {
		if strings.Contains(l, "app output") || strings.Contains(l, "\x1b[2J") {
			t.Errorf("a line of app output as a log record, or raw: %q", l)
		}
	}
}
