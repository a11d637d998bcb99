package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestValidateWarns: a valid manifest whose programs are missing or not
// executable is still valid (exit 0: they may be installed later), and
// validate says which, one warning a line on stderr, or in "warnings"
// with --json.
func TestValidateWarns(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	plain := filepath.Join(dir, "plain")
	missing := filepath.Join(dir, "missing")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := func(t *testing.T, programs ...string) string {
		t.Helper()
		type app struct {
			ID   string   `json:"id"`
			Exec []string `json:"exec"`
		}
		m := struct {
			Version int   `json:"version"`
			Apps    []app `json:"apps"`
		}{Version: 1}
		for i, p := range programs {
			m.Apps = append(m.Apps, app{ID: string(rune('a' + i)), Exec: []string{p}})
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "native-apps.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notThere := `app "a": exec[0]: ` + missing + ` does not exist: the app will fail to start until it does (fix: install the program there, or correct the path)`
	notExec := `app "b": exec[0]: ` + plain + ` is not executable: the app will fail to start until it is (fix: chmod +x ` + plain + `, or correct the path)`
	for _, c := range []struct {
		name     string
		programs []string
		want     []string // the warnings
	}{
		{"all there", []string{exe, exe}, []string{}},
		{"missing and not executable", []string{missing, plain, exe}, []string{notThere, notExec}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := manifest(t, c.programs...)
			r := ctl(t, "validate", path)
			if r.code != exitOK {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, exitOK, r.stderr)
			}
			if want := fmt.Sprintf("%s is valid: %d apps\n", path, len(c.programs)); r.stdout != want {
				t.Errorf("stdout %q, want %q", r.stdout, want)
			}
			var wantErr strings.Builder
			for _, w := range c.want {
				wantErr.WriteString("octosupctl: warning: " + w + "\n")
			}
			if r.stderr != wantErr.String() {
				t.Errorf("stderr %q, want %q", r.stderr, wantErr.String())
			}

			r = ctl(t, "--json", "validate", path)
			var got struct {
				Valid    bool      `json:"valid"`
				Apps     int       `json:"apps"`
				Warnings *[]string `json:"warnings"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK || r.stderr != "" {
				t.Fatalf("--json: exit %d, stdout %q (%v), stderr %q", r.code, r.stdout, err, r.stderr)
			}
			if !got.Valid || got.Apps != len(c.programs) || got.Warnings == nil || !slices.Equal(*got.Warnings, c.want) {
				t.Errorf("--json: %s, want valid, %d apps and warnings %q", r.stdout, len(c.programs), c.want)
			}
		})
	}
}
