package jail

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testCgroup makes an empty cgroup v2 below this process's own and
// returns its path relative to the hierarchy's root and an open
// descriptor of it; it skips where this user may not make one.
func testCgroup(t *testing.T) (rel string, dir *os.File) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	var own string
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	defer mi.Close()
	var mnt string
	for sc := bufio.NewScanner(mi); sc.Scan() && mnt == ""; {
		pre, post, _ := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 && f[3] == "/" {
			mnt = f[4]
		}
	}
	if own == "" || mnt == "" || unix.Access(filepath.Join(mnt, own), unix.W_OK) != nil {
		t.Skip("no cgroup v2 this user may create cgroups in: run as root or under systemd with Delegate=yes")
	}
	path, err := os.MkdirTemp(filepath.Join(mnt, own), "octosup-jailtest.")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil {
			t.Errorf("remove the test's cgroup (a process left in it?): %v", err)
		}
	})
	dir, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	return filepath.Join(own, filepath.Base(path)), dir
}

// TestStartIntoCgroup: with Request.CgroupFD the app starts in that
// cgroup (CLONE_INTO_CGROUP), spawned in-process and through the helper.
func TestStartIntoCgroup(t *testing.T) {
	rel, dir := testCgroup(t)
	h := newHarness(t)
	h.processes = true
	for _, useHelper := range []bool{false, true} {
		h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
		o := h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
			return h.l.Start(Request{App: h.probeApp("cg", "cgroup"), Dirs: h.dirs, Stdout: stdout, Stderr: stderr, Hub: hub, CgroupFD: int(dir.Fd())})
		}, nil)
		if o.err != nil || o.out != "0::"+rel || o.forked == useHelper {
			t.Errorf("UseHelper %v: %+v, want 0::%s", useHelper, o, rel)
		}
	}
	// Without it, the app stays in the daemon's cgroup.
	h.l = NewLauncher(Config{HelperPath: h.helper})
	o := h.runApp(h.probeApp("cg", "cgroup"), nil, nil)
	if o.err != nil || o.out != "0::"+filepath.Dir(rel) {
		t.Errorf("no CgroupFD: %+v, want 0::%s", o, filepath.Dir(rel))
	}
}

// TestKilledBeforeExec: an in-process spawn whose child dies before it
// reaches execve is a failed start (ErrHelperDied), never a running app
// with a full report. The child is forked into a frozen cgroup, so it
// stops before its first instruction, and is killed there.
func TestKilledBeforeExec(t *testing.T) {
	_, dir := testCgroup(t)
	path := dir.Name()
	write := func(file, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(path, file), []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.freeze", "1")
	h := newHarness(t)
	type started struct {
		o outcome
	}
	done := make(chan started, 1)
	go func() {
		o := h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
			return h.l.Start(Request{App: h.probeApp("frozen", "getpid"), Dirs: h.dirs, Stdout: stdout, Stderr: stderr, Hub: hub, CgroupFD: int(dir.Fd())})
		}, nil)
		done <- started{o}
	}()
	// No event says the child is in the cgroup: read cgroup.procs until
	// it is, within a bound (then thaw it, so that Start returns and the
	// test fails rather than hangs).
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			write("cgroup.freeze", "0")
			<-done
			t.Fatal("the child never appeared in its cgroup")
		}
		time.Sleep(time.Millisecond)
	}
	write("cgroup.kill", "1")
	r := <-done
	write("cgroup.freeze", "0")
	if !r.o.forked {
		t.Fatalf("not spawned in-process: %+v", r.o)
	}
	if !errors.Is(r.o.err, ErrHelperDied) || r.o.report.Layers != nil || r.o.out != "" {
		t.Fatalf("a child killed before execve: %+v, want ErrHelperDied, no report, no output", r.o)
	}
}

// TestBroadStaysInItsLeaf: a broad app (its filesystem not narrowed) can
// neither move itself out of its leaf nor reach another app's leaf: the
// cgroup tree is what keeps its processes under supervision. Both spawn
// paths, with a plain probe doing the same as the positive control.
func TestBroadStaysInItsLeaf(t *testing.T) {
	_, dir := testCgroup(t)
	_, other := testCgroup(t)
	parent := filepath.Dir(dir.Name())
	h := newHarness(t)
	for _, useHelper := range []bool{false, true} {
		h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
		run := func(args ...string) outcome {
			app := h.probeApp("broad", args...)
			withBroad(&app)
			withProcesses(&app)
			return h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
				return h.l.Start(Request{App: app, Dirs: h.dirs, Stdout: stdout, Stderr: stderr, Hub: hub, CgroupFD: int(dir.Fd())})
			}, nil)
		}
		for _, c := range []struct{ file, value string }{
			{filepath.Join(parent, "cgroup.procs"), "0"},
			{filepath.Join(other.Name(), "cgroup.procs"), "0"},
			{filepath.Join(other.Name(), "cgroup.kill"), "1"},
			{filepath.Join(other.Name(), "cgroup.freeze"), "0"},
		} {
			o := run("write_file", c.file, c.value)
			if o.err != nil || o.out != "EACCES" {
				t.Errorf("UseHelper %v: a broad app writing %s to %s: %+v, want EACCES", useHelper, c.value, c.file, o)
			}
		}
		// Writing elsewhere still works: the jail's own directory.
		if o := run("write", filepath.Join(h.dirs.JailDir("broad"), "x")); o.out != "ok" {
			t.Errorf("UseHelper %v: a broad app writing its jail: %+v, want ok", useHelper, o)
		}
	}
	if got := h.runPlain("write_file", filepath.Join(other.Name(), "cgroup.procs"), "0"); got != "ok" {
		t.Errorf("control: a plain process moving itself into a cgroup: %s, want ok", got)
	}
}
