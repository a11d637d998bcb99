package jail

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// lowFDsEnv tells a re-executed copy of this binary which spawn path to
// run TestSpawnWithLowFDs's combinations on.
const lowFDsEnv = "OCTOSUP_TEST_LOW_FDS"

// lowFDs is how many of the daemon's lowest descriptors the property
// test sets open or closed: 0..10, 2048 combinations.
const lowFDs = 11

// TestSpawnWithLowFDs: whichever of the daemon's descriptors 0..10 are
// open or closed, an app starts, and its 0..3 are /dev/null, the stdout
// and stderr it was given and the hub, with nothing else open. A daemon
// under socket activation gets its listener on fd 3 and may have closed
// its stdin: the descriptors a start opens (the Landlock ruleset, the
// notify socket, the hub, the capture pipes) then land among 0..3, the
// very numbers the spawn dup2s onto, and the in-process spawn failed
// "landlock: add /proc/self: EBADFD". Every combination runs in one
// re-executed copy of this binary, whose own 0..10 it may close.
func TestSpawnWithLowFDs(t *testing.T) {
	if path := os.Getenv(lowFDsEnv); path != "" {
		testLowFDsInside(t, path == "helper")
		return
	}
	if !SpawnsInProcess() {
		t.Skip("no in-process spawn on this kernel or architecture")
	}
	if _, err := exec.LookPath("readlink"); err != nil {
		t.Skip("no readlink, the app that shows its fds:", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"fork", "helper"} {
		t.Run(path, func(t *testing.T) {
			// 3..10 are open in the copy from its first instruction, so
			// that what its runtime opens (the poller) lands above them.
			var extra []*os.File
			for range lowFDs - 3 {
				f, err := os.Open(os.DevNull)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				extra = append(extra, f)
			}
			cmd := exec.Command(exe, "-test.run=^TestSpawnWithLowFDs$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), lowFDsEnv+"="+path)
			cmd.ExtraFiles = extra
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "\nPASS") {
				t.Fatalf("%s spawn with fds 0..%d open and closed: %v\n%s", path, lowFDs-1, err, out)
			}
			for line := range strings.SplitSeq(string(out), "\n") {
				if strings.Contains(line, "combinations") {
					t.Log(strings.TrimSpace(line))
				}
			}
		})
	}
}

// testLowFDsInside runs every combination in this process, which
// TestSpawnWithLowFDs started with 0..10 open.
func testLowFDsInside(t *testing.T, useHelper bool) {
	readlink, err := exec.LookPath("readlink")
	if err != nil {
		t.Skip("no readlink:", err)
	}
	// What each of 0..10 holds when it is open: the process's own 0..2,
	// /dev/null for the others. Copies above them, close-on-exec.
	var saved [lowFDs]int
	for fd := range lowFDs {
		if fd >= 3 {
			if link, err := os.Readlink(fdLink(fd)); err != nil || link != os.DevNull {
				t.Fatalf("fd %d is %q (%v) at the start, want the /dev/null the parent passed", fd, link, err)
			}
		}
		c, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 64)
		if err != nil {
			t.Fatalf("save fd %d: %v", fd, err)
		}
		saved[fd] = c
	}
	restore := func() {
		for fd := range lowFDs {
			unix.Dup2(saved[fd], fd)
		}
	}
	// Whatever happens, 0..2 are the test's output again before it
	// reports: nothing in the loop writes to them.
	defer restore()

	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
	// readlink, not a Go probe: 2048 starts of a race-built Go binary
	// take a minute and a half, of readlink a few seconds. Its
	// /proc/self is its own: 4..12 must not be there.
	args := []string{readlink}
	for fd := range lowFDs + 2 {
		args = append(args, "/proc/self/fd/"+strconv.Itoa(fd))
	}
	no := false
	app := policy.App{ID: "lowfds", Exec: args,
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &no}}
	// One start with everything open first: what a Launcher makes once
	// (the kernel probe, the exec arena, the filter cache) stays above 10.
	if r := startLowFDs(t, h, app, false); r.err != nil || r.got != r.want {
		t.Fatalf("with fds 0..%d open: %v, the app's 0..12 are\n%s\nwant\n%s", lowFDs-1, r.err, r.got, r.want)
	}

	var failed []string
	n := 0
	for mask := range 1 << lowFDs {
		// The capture pipes and the hub opened after the daemon's low fds
		// were freed (they may land among 0..3 themselves), and before.
		for _, sourcesLow := range []bool{true, false} {
			if useHelper && !helperCombination(mask) {
				continue
			}
			set := func() {
				for fd := range lowFDs {
					if mask&(1<<fd) != 0 {
						unix.Dup2(saved[fd], fd)
					} else {
						unix.Close(fd)
					}
				}
			}
			// Every third start without a stderr: the Launcher's
			// /dev/null takes its place.
			var r lowFDsStart
			if sourcesLow {
				set()
				r = startLowFDs(t, h, app, mask%3 == 0)
			} else {
				restore()
				r = startLowFDs(t, h, app, mask%3 == 0, set)
			}
			n++
			var why []string
			switch {
			case r.err != nil:
				why = append(why, r.err.Error())
			case r.got != r.want:
				why = append(why, fmt.Sprintf("the app's 0..12 are %q, want %q", r.got, r.want))
			}
			if r.forked == useHelper {
				why = append(why, fmt.Sprintf("spawned in-process %v with UseHelper %v", r.forked, useHelper))
			}
			// A start leaves none of its descriptors behind.
			for fd := range lowFDs {
				if mask&(1<<fd) == 0 {
					if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
						link, _ := os.Readlink(fdLink(fd))
						why = append(why, fmt.Sprintf("fd %d (%s) left open", fd, link))
						unix.Close(fd)
					}
				}
			}
			if len(why) > 0 {
				where := "above 10"
				if sourcesLow {
					where = "after"
				}
				failed = append(failed, fmt.Sprintf("open %s, pipes and hub made %s: %s", openSet(mask), where, strings.Join(why, "; ")))
			}
		}
	}
	restore()
	for i, f := range failed {
		if i == 20 {
			t.Errorf("… and %d more", len(failed)-i)
			break
		}
		t.Error(f)
	}
	t.Logf("%d of %d combinations of fds 0..%d open started the app right (UseHelper %v)", n-len(failed), n, lowFDs-1, useHelper)
}

// helperCombination picks the combinations the helper path runs: every
// one of 0..5 with 6..10 all open or all closed. Go's fork of the helper
// places its descriptors as os/exec always has, and the full set costs
// it a minute; the in-process spawn runs all 2048.
func helperCombination(mask int) bool {
	high := mask >> 6
	return high == 0 || high == 1<<(lowFDs-6)-1
}

// lowFDsStart is what one start in testLowFDsInside saw.
type lowFDsStart struct {
	got, want string // the app's readlink of its 0..12, and what it should print
	forked    bool
	err       error
}

// startLowFDs runs app (readlink of its fds) as the daemon would: the
// capture pipes and the hub first, then, when given, set lays out the
// daemon's low fds, then Start on the spawner thread.
func startLowFDs(t *testing.T, h *harness, app policy.App, nilStderr bool, set ...func()) (r lowFDsStart) {
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer errR.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "hub"), os.NewFile(uintptr(pair[1]), "hub-app")
	defer ours.Close()
	for _, f := range set {
		f()
	}
	links := []string{os.DevNull, linkOf(outW), linkOf(errW), linkOf(theirs)}
	stderr := errW
	if nilStderr {
		stderr, links[2] = nil, os.DevNull
	}
	r.want = strings.Join(links, "\n")
	var p *Process
	h.sp.do(func() {
		p, err = h.l.Start(Request{App: app, Dirs: h.dirs, BaseEnv: []string{"PATH=/usr/bin:/bin"}, Stdout: outW, Stderr: stderr, Hub: theirs})
	})
	outW.Close()
	errW.Close()
	theirs.Close()
	if err != nil {
		r.err = err
		return r
	}
	defer unix.Close(p.Pidfd)
	_, r.err = p.Confirm()
	r.forked = p.forked
	served := make(chan error, 1)
	if g := p.Guard(); g != nil {
		go func() { served <- g.Serve(context.Background()) }()
	} else {
		served <- nil
	}
	out, _ := io.ReadAll(outR)
	r.got = strings.TrimSpace(string(out))
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, p.Pidfd, &info, unix.WEXITED, nil); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if err := <-served; err != nil && r.err == nil {
		r.err = err
	}
	return r
}

func fdLink(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// linkOf is what /proc shows for f: the app's readlink prints the same
// for the same open file.
func linkOf(f *os.File) string {
	link, err := os.Readlink(fdLink(int(f.Fd())))
	if err != nil {
		return err.Error()
	}
	return link
}

// openSet names the fds mask has open, "{0,3,7}".
func openSet(mask int) string {
	var fds []string
	for fd := range lowFDs {
		if mask&(1<<fd) != 0 {
			fds = append(fds, strconv.Itoa(fd))
		}
	}
	return "{" + strings.Join(fds, ",") + "}"
}
