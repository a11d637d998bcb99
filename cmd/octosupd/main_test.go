package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.uber.org/goleak"

	"octosup/jail"
)

func TestMain(m *testing.M) {
	// A daemon of these tests that cannot spawn in-process runs the test
	// binary as its jail helper.
	if jail.IsHelper(os.Args) {
		os.Exit(jail.RunHelper())
	}
	goleak.VerifyTestMain(m)
}

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"apps":[{"id":"Bad","exec":["x"],"grants":{},"sandbox":{"policy":"jail","network":"none"},"storage":{}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The manifest cases need a helper that passes the start check; any
	// executable does, as no app starts.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"invalid manifest", []string{"run", "--jail-helper", exe, "--config", bad}, exitManifest,
			`(?s)^octosupd: the manifest .*bad.json has 2 problem\(s\); fix them and start again:\n  app #0: id: .*\n  app #0: exec\[0\]: .*\n$`},
		{"missing manifest", []string{"run", "--jail-helper", exe, "--config", filepath.Join(dir, "none.json")}, exitFailed,
			`^octosupd: no manifest at .*none.json: create one .* or pass --config FILE\n$`},
		// The test binary has no octosup-jail next to it: apps spawned
		// in-process do without (it goes on to the manifest), while
		// --jail-spawn helper needs it.
		{"no helper, in-process spawn", []string{"run", "--config", bad}, exitManifest,
			`(?s)^octosupd: the manifest .*bad.json has 2 problem\(s\)`},
		{"no helper next to octosupd", []string{"run", "--jail-spawn", "helper", "--config", bad}, exitFailed,
			`^octosupd: jail helper not found: octosup-jail not found next to octosupd.test \(.*\): install it \(make install\) or pass --jail-helper\n$`},
		{"bad spawn", []string{"run", "--jail-spawn", "vfork", "--config", bad}, exitUsage,
			`^octosupd: --jail-spawn "vfork": want fork or helper\n$`},
		{"helper not executable", []string{"run", "--jail-helper", bad, "--config", bad}, exitFailed,
			`^octosupd: jail helper not found: --jail-helper .*bad.json: .*bad.json is not executable: permission denied\n$`},
		{"bad log level", []string{"run", "--log-level", "loud"}, exitUsage, `^octosupd: --log-level "loud": use debug, info, warn or error\n$`},
		{"unknown flag", []string{"run", "--bogus"}, exitUsage, `^octosupd: unknown flag: --bogus\n$`},
		{"arguments", []string{"run", "extra"}, exitUsage, `unknown command "extra"`},
		{"no command", nil, exitUsage, "^octosupd: no command given: run `octosupd run` \\(what systemd runs\\), or see octosupd --help\n$"},
		{"version", []string{"--version"}, exitOK, `^octosupd version \S+`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A per-user environment of its own, so that no real daemon
			// or manifest is touched.
			t.Setenv("HOME", dir)
			t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
			t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
			stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			code := run(context.Background(), tt.args, stderr)
			out, _ := os.ReadFile(stderr.Name())
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.wantCode, out)
			}
			// JSON log lines (stderr is not a terminal) precede the error.
			lines := regexp.MustCompile(`(?m)^\{.*\}\n`).ReplaceAll(out, nil)
			if !regexp.MustCompile(tt.wantStderr).Match(lines) {
				t.Errorf("stderr %q does not match %q", lines, tt.wantStderr)
			}
		})
	}
}
