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
//
// A run that needs more than the test binary (a helper, an app) copies
// each file with Copy into the directory of NewDir and runs with RunIn.
package asnobody

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Run is RunIn in a NewDir of its own, skipped under -short.
func Run(t *testing.T, pattern string, env ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	return RunIn(t, NewDir(t), pattern, env...)
}

// NewDir makes a directory nobody may read, removed when the test ends
// (a test binary sits in a 0700 build directory: nobody gets copies).
// It skips the test where it cannot switch users: not root, or no
// setpriv.
func NewDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the other tests are the unprivileged run")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed: cannot switch to nobody")
	}
	dir, err := os.MkdirTemp("", "octosup-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Copy copies the file from into dir as name, executable, and returns
// its path.
func Copy(t *testing.T, dir, from, name string) string {
	t.Helper()
	to := filepath.Join(dir, name)
	if err := copyFile(from, to); err != nil {
		t.Fatal(err)
	}
	return to
}

// RunIn runs the test binary again as nobody (setpriv, no groups, no
// capabilities) with -test.run pattern and -test.v, from a copy in dir,
// and returns its output once it passed; it fails the test when the run
// fails. env is added to a minimal environment.
func RunIn(t *testing.T, dir, pattern string, env ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := Copy(t, dir, exe, filepath.Base(exe))
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
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
