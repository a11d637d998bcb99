package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"octosup/control"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// TestStatusTable: a failure's reason has a column of its own, last, cut
// so that each line fits the terminal's width, with a word of where the
// whole reason is; without a width (not a terminal, no COLUMNS) and for
// status APP it is whole. Golden files: go test -run TestStatusTable -update.
func TestStatusTable(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	long := "program not found: open /nonexistent/octosup-test/a-program-whose-path-is-long/app: no such file or directory"
	jl := &control.JailReport{LandlockABI: 7, Layers: []string{"env", "fds", "no_new_privs", "caps", "landlock", "seccomp"}, Missing: []string{}}
	all := control.StatusData{Apps: []control.AppStatus{
		{ID: "clock", State: "running", Pid: 1457, Since: now.Add(-3 * time.Second), Jail: jl},
		{ID: "broken", State: "failed", Reason: long, Since: now},
		{ID: "notes", State: "stopped", Restarts: 2, Since: now, LastExit: &control.Exit{Code: -1, Signal: "SIGKILL", At: now.Add(-7 * time.Second)}, Jail: jl},
		{ID: "hostile", State: "failed", Reason: "\x1b]0;pwned\x07 " + strings.Repeat("é", 90), Since: now},
	}}
	running := control.StatusData{Apps: all.Apps[:1]}
	tests := []struct {
		name  string
		data  control.StatusData
		width int
		fits  bool // every line fits in width
	}{
		{"status-110", all, 110, true},
		{"status-120", all, 120, true},
		// Narrower than the other columns: the reason keeps a few
		// characters, the line is as wide as it must be.
		{"status-30", all, 30, false},
		{"status-whole", all, 0, false},
		{"status-one", control.StatusData{Apps: all.Apps[1:2]}, 0, false},
		// No reason: no column for one.
		{"status-running", running, 80, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printStatus(&cli{stdout: &out}, tt.data, now, tt.width)
			got := out.String()
			if tt.fits {
				for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
					if n := utf8.RuneCountInString(l); n > tt.width {
						t.Errorf("line of %d characters, wider than %d: %q", n, tt.width, l)
					}
				}
			}
			checkVisible(t, tt.name, got)
			golden(t, filepath.Join("testdata", tt.name+".golden"), got)
		})
	}
}

// TestFailedAppReason: against a real daemon, a failed app's reason is in
// the REASON column, cut to COLUMNS; status APP has it whole.
func TestFailedAppReason(t *testing.T) {
	socket, _ := startDaemon(t, "testdata/failing.json")
	s := []string{"--socket", socket}
	const program = "/nonexistent/octosup-test/a-program-whose-path-is-long-enough-to-make-its-failure-reason-wider-than-any-terminal/app"
	r := ctl(t, append(s, "start", "broken")...)
	if r.code != exitFailed || !regexp.MustCompile(`^octosupctl: start broken: failed to start: [^\n]*`+regexp.QuoteMeta(program)+`[^\n]*\n$`).MatchString(r.stderr) {
		t.Errorf("start broken: %+v", r)
	}
	t.Setenv("COLUMNS", "80")
	r = ctl(t, append(s, "status")...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != exitOK || len(lines) != 4 ||
		!regexp.MustCompile(`^APP +STATE +PID +UPTIME +RESTARTS +LAST EXIT +JAIL +REASON$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^broken +failed +- +- +0 +- +- +program not found: [^\n]*…$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^idle +stopped +- +- +0 +- +- *$`).MatchString(lines[2]) ||
		lines[3] != "(a reason is cut to the terminal's width: octosupctl status APP shows it whole)" {
		t.Errorf("status:\n%s", r.stdout)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("status line of %d characters, wider than COLUMNS=80: %q", n, l)
		}
	}
	r = ctl(t, append(s, "status", "broken")...)
	if r.code != exitOK || !regexp.MustCompile(`(?m)^broken +failed +- +- +0 +- +- +program not found: [^\n]*`+regexp.QuoteMeta(program)+`: no such file or directory$`).MatchString(r.stdout) {
		t.Errorf("status broken:\n%s", r.stdout)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed; run with -update if intended.\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestStatusShowsTheStore: status prints the state store's notes after
// the apps (also with no apps), and --json has the store member whole; a
// healthy store adds nothing.
func TestStatusShowsTheStore(t *testing.T) {
	app := control.AppStatus{ID: "clock", State: "stopped"}
	sick := &control.StoreStatus{Path: "/s/state.db", AuditDropped: 87, AuditError: "no space left on device",
		Notes: []string{"audit: 87 entries dropped: no space left on device"}}
	tests := []struct {
		name   string
		data   control.StatusData
		stdout string // regexp
	}{
		{"healthy", control.StatusData{Apps: []control.AppStatus{app}, Store: &control.StoreStatus{Path: "/s/state.db", Healthy: true, Notes: []string{}}},
			`^APP +STATE .*\nclock +stopped .*\n$`},
		{"audit dropped", control.StatusData{Apps: []control.AppStatus{app}, Store: sick},
			`^APP +STATE .*\nclock +stopped .*\nstore: audit: 87 entries dropped: no space left on device\n$`},
		{"no apps", control.StatusData{Apps: []control.AppStatus{}, Store: sick},
			`^no apps in the manifest\nstore: audit: 87 entries dropped: no space left on device\n$`},
		{"an older daemon", control.StatusData{Apps: []control.AppStatus{app}}, `^APP +STATE .*\nclock +stopped .*\n$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := fakeDaemon(t, func(op string, _ json.RawMessage, _ bool) (any, *control.Error, []fakeEvent) {
				return tt.data, nil, nil
			})
			r := ctl(t, "--socket", socket, "status")
			if r.code != exitOK || !regexp.MustCompile(tt.stdout).MatchString(r.stdout) {
				t.Fatalf("status: %+v, want stdout %s", r, tt.stdout)
			}
			r = ctl(t, "--socket", socket, "--json", "status")
			var got control.StatusData
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK {
				t.Fatalf("status --json: %v %+v", err, r)
			}
			if want := string(mustJSON(t, tt.data)); string(mustJSON(t, got)) != want {
				t.Fatalf("status --json has %s, want %s", mustJSON(t, got), want)
			}
		})
	}
}
