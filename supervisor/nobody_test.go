package supervisor

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAsNobody re-runs the tests of what an app does to its parentage,
// session and process group as an unprivileged user with no cgroup of
// its own: a daemon run by a person, whose only stopper is the process
// group and the subreaper. It runs only where it can switch users (root
// with setpriv).
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
	dir, err := os.MkdirTemp("", "octosup-supervisor-nobody-")
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
	bin := filepath.Join(dir, "supervisor.test")
	if err := copyTestBinary(exe, bin); err != nil {
		t.Fatal(err)
	}
	tests := []string{"TestOrphanStaysTheApps", "TestStopEndsEveryProcess", "TestTermReachesEveryProcess", "TestCgroupStopsSetsidDescendant", "TestStopKillsGrandchild"}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		"--", bin, "-test.run=^("+strings.Join(tests, "|")+")$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "GORACE=" + os.Getenv("GORACE")}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nPASS") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	// The run must have been real: the process-group cases ran and passed.
	for _, name := range []string{
		"TestOrphanStaysTheApps/process-group/jail", "TestOrphanStaysTheApps/process-group/broad-setsid",
		"TestStopEndsEveryProcess/process-group",
		"TestTermReachesEveryProcess/process-group/own-group", "TestTermReachesEveryProcess/process-group/broad-setsid",
		"TestCgroupStopsSetsidDescendant/process-group_fallback", "TestStopKillsGrandchild",
	} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("as nobody %s did not pass:\n%s", name, out)
		}
	}
}

func copyTestBinary(from, to string) error {
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
