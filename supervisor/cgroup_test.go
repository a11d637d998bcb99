package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

func TestOwnCgroup(t *testing.T) {
	for _, c := range []struct {
		mountinfo, cgroup string
		want              string
		err               string
	}{
		{"mountinfo-hybrid", "cgroup-hybrid", "/sys/fs/cgroup/unified", ""},
		{"mountinfo-unified", "cgroup-service", "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/octosupd.service", ""},
		{"mountinfo-bind-then-root", "cgroup-hybrid", "/run/my cgroup", ""},
		{"mountinfo-v1", "cgroup-hybrid", "", "no cgroup2 filesystem is mounted"},
		{"mountinfo-unified", "cgroup-v1", "", "no cgroup v2 line"},
		{"mountinfo-none", "cgroup-hybrid", "", "no such file"},
	} {
		t.Run(c.mountinfo+"+"+c.cgroup, func(t *testing.T) {
			got, err := ownCgroup(filepath.Join("..", "internal", "cgroupfs", "testdata", c.mountinfo), filepath.Join("testdata", c.cgroup))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrNoCgroup) {
					t.Fatalf("%q, %v; want an ErrNoCgroup saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// cgroupOrSkip skips a test that needs this process to be able to make
// cgroup leaves.
func cgroupOrSkip(t *testing.T) string {
	t.Helper()
	own, err := ownCgroup("/proc/self/mountinfo", "/proc/self/cgroup")
	if err == nil {
		err = unix.Access(own, unix.W_OK)
	}
	if err != nil {
		skipUnlessRequired(t)("no cgroup v2 this user may create cgroups in (%v): run as root or under systemd with Delegate=yes", err)
	}
	// A supervisor of this test may have moved the process into its own
	// leaf already: the cgroup divided is the one it came from.
	name, err := subtreeName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return outOfDaemonLeaf(own, name)
}

// TestCgroupStopsSetsidDescendant: a descendant that left the app's
// process group and session is stopped with the app by the cgroup
// stopper, on a stop and when the app's leader dies; without a cgroup
// too, now that the daemon is the subreaper that inherits it (before,
// the process-group fallback could not reach it).
func TestCgroupStopsSetsidDescendant(t *testing.T) {
	for _, c := range []struct {
		name     string
		noCgroup bool
		end      string // "stop" or "leader killed"
	}{
		{"cgroup stop", false, "stop"},
		{"cgroup leader killed", false, "leader killed"},
		{"process-group fallback", true, "stop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.noCgroup {
				cgroupOrSkip(t)
			}
			exe := testExe(t)
			// A stop gives the rest of the app its grace, then kills it; a
			// leader's death without a stop kills the rest at once: a grace
			// far longer than the test waits says that kill is what ends it.
			grace := 10 * time.Minute
			if c.end == "stop" {
				grace = 300 * time.Millisecond
			}
			sup := startSup(t, func(cfg *testConfig) { cfg.StopGrace = grace; cfg.noCgroup = c.noCgroup })
			sub := sup.Subscribe(1024)
			defer sub.Close()
			apply(t, sup, testApp(exe, "tree", "setsid-grandchild", true))
			gpid := waitPid(t, sub, "tree", "grandchild")
			gfd := pidfd(t, gpid)
			st := status(t, sup, "tree")
			if sid, err := unix.Getsid(gpid); err != nil || sid == st.Pid || sid != gpid {
				t.Fatalf("grandchild %d: session %d, %v; want its own, not the app's (%d)", gpid, sid, err, st.Pid)
			}
			want := StopperCgroup
			if c.noCgroup {
				want = StopperProcessGroup
			}
			if st.Stopper != want {
				t.Fatalf("stopper %q, want %q", st.Stopper, want)
			}
			wantInside(t, sup.CheckCaller(Caller{Pid: gpid, Pidfd: gfd}), "tree", "")
			var leaf string
			if !c.noCgroup {
				var err error
				leaf, err = ownCgroup("/proc/self/mountinfo", fmt.Sprintf("/proc/%d/cgroup", gpid))
				if err != nil || filepath.Dir(leaf) != sup.cgroups.dir || !strings.HasPrefix(filepath.Base(leaf), "tree.") {
					t.Fatalf("grandchild's cgroup %q, %v; want a leaf tree.* of %s", leaf, err, sup.cgroups.dir)
				}
				// Found by its leaf, whatever the process tree says.
				wantInside(t, sup.CheckCaller(Caller{Pid: gpid, Pidfd: gfd}), "tree", "its cgroup "+strings.TrimPrefix(leaf, sup.cgroups.mnt))
			}

			switch c.end {
			case "stop":
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				if _, err := sup.Stop(ctx, "tree"); err != nil {
					t.Fatal(err)
				}
			case "leader killed":
				if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitState(t, sub, "tree", inState(Stopped))
				// The emptied leaf is removed just after the stopped
				// event, before the app's goroutine serves anything
				// else: a Stop of the stopped app is answered once the
				// leaf is gone.
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				if _, err := sup.Stop(ctx, "tree"); err != nil {
					t.Fatal(err)
				}
			}
			awaitGone(t, gfd, "setsid grandchild")
			if c.noCgroup {
				return
			}
			if _, err := os.Stat(leaf); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("leaf %s still there after the app stopped: %v", leaf, err)
			}
		})
	}
}

// TestCgroupLeftovers: the subtree of a daemon that is gone (its name
// does not match a live process) is killed and removed at the next start;
// the subtree of a live one is left alone.
func TestCgroupLeftovers(t *testing.T) {
	own := cgroupOrSkip(t)
	// This very pid with another start time: a daemon that was.
	gone := filepath.Join(own, fmt.Sprintf("%s%d.1", subtreePrefix, os.Getpid()))
	leaf := filepath.Join(gone, "app.1")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeLeaf(leaf); _ = os.Remove(gone) })
	dir, err := os.Open(leaf)
	if err != nil {
		t.Fatal(err)
	}
	// Outside any process group of ours, as a setsid descendant would be.
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	err = cmd.Start()
	dir.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if !populated(leaf) {
		t.Fatalf("%s is empty after starting a process in it", leaf)
	}

	tree, err := openCgroupTree(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tree.close()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("leftover process ended with %v, want SIGKILL", err)
		}
	case <-time.After(waitFor):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("the leftover process still runs after the next start")
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the gone daemon's subtree is still there: %v", err)
	}
	if _, err := os.Stat(tree.dir); err != nil {
		t.Errorf("the live daemon's subtree: %v", err)
	}
}

// TestAwaitEmptyWakes: the kernel wakes a poll of cgroup.events when the
// leaf empties, which is what awaitEmpty sleeps on; without that wakeup
// every kill would wait out cgroupDrain.
func TestAwaitEmptyWakes(t *testing.T) {
	cgroupOrSkip(t)
	tree, err := openCgroupTree(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tree.close()
	leaf, dir, err := tree.leaf("wake")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	err = cmd.Start()
	dir.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(filepath.Join(leaf, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 512)
	if n, err := unix.Pread(fd, buf, 0); err != nil || !populatedIn(buf[:n]) {
		t.Fatalf("cgroup.events %q, %v: want populated 1", buf[:n], err)
	}
	if err := killLeaf(leaf); err != nil {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, int(waitFor/time.Millisecond))
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Poll(fds, int(waitFor/time.Millisecond))
	}
	if err != nil || n != 1 || fds[0].Revents&unix.POLLPRI == 0 {
		t.Errorf("poll: %d, %v, revents %#x; want POLLPRI once the leaf changed", n, err, fds[0].Revents)
	}
	if err := removeLeaf(leaf); err != nil {
		t.Error(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the process in the killed leaf exited 0")
	}
}

// TestProcessLeaf: a leaf opened for a process kills everything in it
// through its held cgroup.kill, sees it empty through its held
// cgroup.events, and is removed.
func TestProcessLeaf(t *testing.T) {
	cgroupOrSkip(t)
	tree, err := openCgroupTree(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tree.close()
	path, dir, err := tree.leaf("held")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := openProcessLeaf(path, dir)
	if err != nil {
		dir.Close()
		t.Fatal(err)
	}
	// Outside any process group of ours, as a setsid descendant would be.
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	err = cmd.Start()
	dir.Close()
	if err != nil {
		leaf.close()
		t.Fatal(err)
	}
	if err := leaf.awaitEmpty(0); err == nil {
		t.Error("awaitEmpty(0) of a leaf with a process in it returned nil")
	}
	if err := leaf.killAll(); err != nil {
		t.Fatal(err)
	}
	if err := leaf.awaitEmpty(waitFor); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process in the leaf ended with %v, want SIGKILL", err)
	}
	if err := leaf.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leaf %s still there after remove: %v", path, err)
	}
}

// leavesOf lists the leaves of app in sup's cgroup subtree: none where
// sup stops apps through process groups, or once the subtree is gone.
func leavesOf(t testing.TB, sup *Supervisor, app string) []string {
	t.Helper()
	if sup.cgroups == nil {
		return nil
	}
	entries, err := os.ReadDir(sup.cgroups.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var leaves []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), app+".") {
			leaves = append(leaves, e.Name())
		}
	}
	return leaves
}

// ownCgroup is the directory of this process's cgroup v2: its "0::" line
// in /proc/self/cgroup under the cgroup2 mount found in mountinfo (which
// is /sys/fs/cgroup on a unified system, /sys/fs/cgroup/unified on a
// hybrid one).
func ownCgroup(mountinfo, cgroup string) (string, error) {
	mnt, err := cgroup2Mount(mountinfo)
	if err != nil {
		return "", err
	}
	return cgroupDir(mnt, cgroup)
}

// cgroupDir is the cgroup v2 directory a /proc/PID/cgroup file names,
// under the mount point mnt.
func cgroupDir(mnt, cgroup string) (string, error) {
	rel, err := cgroupPath(cgroup)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	return filepath.Join(mnt, rel), nil
}
