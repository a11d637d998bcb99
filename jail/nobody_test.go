package jail

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAsNobody re-runs the jail's process tests as an unprivileged user:
// Landlock and seccomp need no privilege, and a daemon run by a person is
// not root. It runs only where it can switch users (root with setpriv).
func TestAsNobody(t *testing.T) {
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
	// The test binary sits in a 0700 build directory: nobody gets a copy.
	dir, err := os.MkdirTemp("", "octosup-jail-nobody-")
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
	bin := filepath.Join(dir, "jail.test")
	if err := copyFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	helperBin := filepath.Join(dir, HelperName)
	if err := copyFile(standaloneHelper(t), helperBin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		"--", bin, "-test.run=^(TestEscape|TestJailedProcess|TestNarrow|TestHelperFailure|TestPlantedSymlinkIsNotFollowed|TestPlantedSymlinkRace|TestGuardDoesNotFollowAPlantedRoot|TestSignalsStartClean|TestShebangGrantsOnlyWhatTheKernelRuns|TestExecPathsAreGrantedLikeExternals|TestSigioReachesNoOutsideGroup)$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "GORACE=" + os.Getenv("GORACE"), helperPathEnv + "=" + helperBin}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nPASS") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	// The run must have been real: every escape case ran as nobody.
	if n := strings.Count(string(out), "--- PASS: TestEscape/helper/"); n < 25 {
		t.Fatalf("as nobody only %d escape cases passed:\n%s", n, out)
	}
	for _, name := range []string{"TestPlantedSymlinkIsNotFollowed", "TestPlantedSymlinkRace", "TestGuardDoesNotFollowAPlantedRoot", "TestSignalsStartClean",
		"TestShebangGrantsOnlyWhatTheKernelRuns", "TestExecPathsAreGrantedLikeExternals", "TestSigioReachesNoOutsideGroup"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("as nobody %s did not pass:\n%s", name, out)
		}
	}
	t.Logf("as nobody: %d escape cases passed", strings.Count(string(out), "--- PASS: TestEscape/helper/"))
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
