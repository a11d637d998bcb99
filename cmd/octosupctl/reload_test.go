package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"octosup/control"
)

// TestReload: reload says what it restarted and why; with --keep-running
// the changed app keeps its process and status marks it stale until it
// is restarted (a real daemon, real processes).
func TestReload(t *testing.T) {
	socket, manifest := startDaemon(t, "testdata/apps.json")
	s := []string{"--socket", socket}
	steps := []struct {
		name       string
		args       []string
		before     func()
		wantStdout string // regexp
	}{
		{"start", []string{"start", "talker"}, nil, `^talker: running \(pid \d+\)\n$`},
		{"keep running", []string{"reload", "--keep-running"}, func() { copyFile(t, "testdata/apps-changed.json", manifest) },
			`^reloaded: 3 apps\nadded: extra\nstale: talker \(argv changed\): restart to apply\n$`},
		{"status stale", []string{"status"}, nil,
			`(?m)^talker\s+running \(stale: restart to apply\)\s+\d+\s.*\n^idle\s+stopped\s+-\s.*\n^extra\s+stopped\s+-\s`},
		{"status json stale", []string{"--json", "status", "talker"}, nil, `"stale": \[\n\s+"argv"\n\s+\]`},
		{"restart", []string{"restart", "talker"}, nil, `^talker: running \(pid \d+\)\n$`},
		{"status fresh", []string{"status", "talker"}, nil, `(?m)^talker\s+running\s+\d+\s`},
		{"reload restarts", []string{"reload"}, func() { copyFile(t, "testdata/apps.json", manifest) },
			`^reloaded: 2 apps\nremoved: extra\nrestarted: talker \(argv changed\)\n$`},
		{"reload unchanged", []string{"reload"}, nil, `^reloaded: 2 apps\n$`},
		{"reload json", []string{"--json", "reload"}, nil,
			`^\{\n  "apps": 2,\n  "added": \[\],\n  "removed": \[\],\n  "restarted": \[\],\n  "stale": \[\],\n  "limits": \[\]\n\}\n$`},
		// cgroup files (or the RLIMIT_NPROC standing in) are live: a change
		// of limits alone restarts nothing.
		{"reload limits", []string{"reload"}, func() { copyFile(t, "testdata/apps-limits.json", manifest) },
			`^reloaded: 2 apps\nlimits applied in place: talker\n$`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			r := ctl(t, append(s, st.args...)...)
			if r.code != exitOK || r.stderr != "" {
				t.Errorf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !regexp.MustCompile(st.wantStdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", truncate(r.stdout), st.wantStdout)
			}
		})
	}
}

// TestReloadAnswerRendering: every part of a reload's answer is printed
// for a person, a restart that failed with its reason, and what the
// daemon relays of the manifest and the app shown visibly.
func TestReloadAnswerRendering(t *testing.T) {
	var gotArgs json.RawMessage
	socket := fakeDaemon(t, func(op string, args json.RawMessage, _ bool) (any, *control.Error, []fakeEvent) {
		gotArgs = args
		return control.ReloadData{
			Apps: 3, Added: []string{"new"}, Removed: []string{"old"},
			Restarted: []control.AppChange{
				{App: "web", Changed: []string{"jail"}, State: "running", Pid: 7},
				{App: "cli", Changed: []string{"jail", "exec", "argv"}, State: "failed", Reason: "program not found: /opt/cli\x1b[2J"},
			},
			Stale: []control.AppChange{{App: "notes", Changed: []string{"environment", "directory"}, State: "running", Pid: 9}},
		}, nil, nil
	})
	r := ctl(t, "--socket", socket, "reload", "--keep-running")
	want := "reloaded: 3 apps\nadded: new\nremoved: old\n" +
		"restarted: web (jail changed)\n" +
		"restarted: cli (jail, exec and argv changed): failed: program not found: /opt/cli\\x1b[2J\n" +
		"stale: notes (environment and directory changed): restart to apply\n"
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit %d\nstdout %q\nwant   %q\nstderr %q", r.code, r.stdout, want, r.stderr)
	}
	if string(gotArgs) != `{"keep_running":true}` {
		t.Errorf("the daemon got args %s, want keep_running", gotArgs)
	}
}
