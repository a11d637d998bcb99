// Package asnobody re-runs some of a package's tests as the unprivileged
// user nobody, for the tests of a root run: a daemon run by a person is
// not root, and what holds for one may not hold for the other (Landlock
// and seccomp need no privilege; cgroups, RLIMIT_NPROC and directory
// permissions differ). Only tests import it. A typical use:
//
//	func TestAsNobody(t *testing.T) {
//		out := asnobody.Run(t, "^(TestA|TestB)$")
//		asnobody.WantPassed(t, out, "TestA", "TestB/case")
//	}
package asnobody

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Run runs the test binary again as nobody (setpriv, no groups, no
// capabilities) with -test.run pattern and -test.v, from a copy in a
// directory nobody can read (the build directory is 0700), and returns
// its output once it passed. It skips where it cannot switch users (not
// root, or no setpriv) or under -short, and fails the test when the run
// fails. env is added to a minimal environment.
func Run(t *testing.T, pattern string, env ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the other tests are the unprivileged run")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed: cannot switch to nobody")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	dir, err := os.MkdirTemp("", "octosup-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(exe))
	if err := copyFile(exe, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		"--", bin, "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "GORACE=" + os.Getenv("GORACE")}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nPASS") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	return string(out)
}

// WantPassed fails the test for each of names (a test or subtest as -v
// prints it) that out does not show passed: a run that skipped them
// proves nothing.
func WantPassed(t *testing.T, out string, names ...string) {
	t.Helper()
	for _, name := range names {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("as nobody %s did not pass:\n%s", name, out)
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
