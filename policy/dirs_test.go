package policy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestDirsFromEnvRuntime(t *testing.T) {
	uid := strconv.Itoa(os.Getuid())
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"session runtime dir", map[string]string{"XDG_RUNTIME_DIR": "/run/user/7", "TMPDIR": "/scratch"}, "/run/user/7/octosup"},
		{"TMPDIR from getenv", map[string]string{"TMPDIR": "/scratch"}, "/scratch/octosup-" + uid},
		{"relative TMPDIR ignored", map[string]string{"TMPDIR": "scratch"}, "/tmp/octosup-" + uid},
		{"no TMPDIR", map[string]string{}, "/tmp/octosup-" + uid},
		{"relative runtime dir ignored", map[string]string{"XDG_RUNTIME_DIR": "run"}, "/tmp/octosup-" + uid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["HOME"] = "/home/u"
			// The process's own TMPDIR must not leak in: only getenv counts.
			t.Setenv("TMPDIR", "/process-tmpdir")
			d, err := DirsFromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if d.Runtime != tc.want {
				t.Errorf("Runtime = %q, want %q", d.Runtime, tc.want)
			}
		})
	}
}

func TestEnsurePrivateDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, path string)
		refused string // substring of the error; "" when accepted
	}{
		{"absent, with its parent", func(t *testing.T, path string) {}, ""},
		{"already private", func(t *testing.T, path string) { mkdir(t, path, 0o700) }, ""},
		{"readable by others: tightened", func(t *testing.T, path string) { mkdir(t, path, 0o755) }, ""},
		{"writable by others", func(t *testing.T, path string) { mkdir(t, path, 0o777) }, "others could have put files in it"},
		{"writable by the group", func(t *testing.T, path string) { mkdir(t, path, 0o770) }, "others could have put files in it"},
		{"a symlink to a private directory", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			mkdir(t, target, 0o700)
			mkdir(t, filepath.Dir(path), 0o700)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
		{"a file", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
		{"someone else's", func(t *testing.T, path string) {
			if os.Getuid() != 0 {
				t.Skip("only root can make a directory that belongs to someone else")
			}
			mkdir(t, path, 0o700)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "belongs to uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "parent", "octosup-1000")
			tc.setup(t, path)
			err := EnsurePrivateDir(path)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("EnsurePrivateDir = %v, want an error about %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: mode %s, want a 0700 directory", path, fi.Mode())
			}
		})
	}
}

func mkdir(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	// Chmod, not the umask-filtered mode of Mkdir.
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}
