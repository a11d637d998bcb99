package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"octosup/policy"

	"golang.org/x/sys/unix"
)

// What an adversarial review's probes did to their parentage, sessions
// and process groups, against a real supervisor and real jailed apps,
// with the cgroup stopper (where this user may make cgroups) and without
// it (the process-group stopper of an unprivileged daemon): they are
// different jails.

// stoppers are the two ways the supervisor ends apps.
var stoppers = []struct {
	name     string
	noCgroup bool
}{{"process-group", true}, {"cgroup", false}}

func withStopper(t *testing.T, noCgroup bool) func(*testConfig) {
	t.Helper()
	if !noCgroup {
		cgroupOrSkip(t)
	}
	return func(c *testConfig) { c.noCgroup = noCgroup }
}

// jailTestApp is broadSetsid as a jail app that may fork, as the
// review's probes were: its children try to leave its session.
func jailTestApp(exe, id, mode string) policy.App {
	a := broadSetsid(exe, id, mode)
	yes := true
	a.Sandbox = policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &yes}
	return a
}

// broadSetsid is testApp whose children leave its session (SUPTEST_SETSID).
func broadSetsid(exe, id, mode string) policy.App {
	a := testApp(exe, id, mode, true)
	a.Env["SUPTEST_SETSID"] = "1"
	return a
}

// TestOrphanStaysTheApps is the review's first escape: a grandchild of
// an app whose parent exited (in a session of its own, for a broad app)
// was re-parented to init, and the peer walk, which ended there, served
// it on the control socket: it stopped another app and could approve its
// own consent. Now the daemon is the apps' subreaper: the orphan is its
// child, placed inside, stopped with its app and reaped.
func TestOrphanStaysTheApps(t *testing.T) {
	exe := testExe(t)
	for _, st := range stoppers {
		for _, app := range []struct {
			name string
			make func(exe, id, mode string) policy.App
		}{{"jail", jailTestApp}, {"broad-setsid", broadSetsid}} {
			t.Run(st.name+"/"+app.name, func(t *testing.T) {
				sup := startSup(t, withStopper(t, st.noCgroup))
				sub := sup.Subscribe(1024)
				defer sub.Close()
				apply(t, sup, app.make(exe, "orph", "orphan"))
				want := []string{"orphan ", "ready"}
				if app.name == "jail" {
					want = append(want, "setsid: operation not permitted")
				}
				f := strings.Fields(waitLogs(t, sub, "orph", want...)[0])
				if len(f) != 4 {
					t.Fatalf("bad line %q", f)
				}
				gpid, _ := strconv.Atoi(f[1])
				if f[2] != strconv.Itoa(os.Getpid()) {
					t.Errorf("the orphan %d was re-parented to %s, not to the daemon %d", gpid, f[2], os.Getpid())
				}
				gfd := pidfd(t, gpid)
				wantInside(t, sup.CheckCaller(Caller{Pid: gpid, Pidfd: gfd}), "", "")

				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				if _, err := sup.Stop(ctx, "orph"); err != nil {
					t.Fatal(err)
				}
				awaitGone(t, gfd, "the orphan")
				awaitReaped(t, gpid)
			})
		}
	}
}

// waitLogs reads sub until app id has printed a line starting with each
// of prefixes, in any order, and returns them in the order asked.
func waitLogs(t *testing.T, sub *Subscription, id string, prefixes ...string) []string {
	t.Helper()
	got := make([]string, len(prefixes))
	left := len(prefixes)
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	var seen []string
	for left > 0 {
		select {
		case ev, open := <-sub.Events():
			if !open {
				t.Fatalf("subscription ended while waiting for output of %s: %v", id, sub.Err())
			}
			if ev.Kind != KindLog || ev.Log.App != id {
				continue
			}
			seen = append(seen, ev.Log.Text)
			for i, p := range prefixes {
				if got[i] == "" && strings.HasPrefix(ev.Log.Text, p) {
					got[i] = ev.Log.Text
					left--
					break
				}
			}
		case <-timeout.C:
			t.Fatalf("%s printed no line starting with each of %q within %s; it printed %q", id, prefixes, waitFor, seen)
		}
	}
	return got
}

// awaitReaped waits, bounded, until the exited process pid is no longer
// a zombie: the daemon, its parent now, reaped it.
func awaitReaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		st, err := readStat(pid)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still there (%c, %v) %s after it exited: nobody reaped it", pid, st.state, err, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopEndsEveryProcess is the review's third escape: an app that
// joined the daemon's process group could not be stopped (the stop
// signalled only its own, empty, group), and the daemon's own shutdown
// never ended. Now the app cannot join (a session of its own), and the
// stop ends its main process through its pidfd and every process of its
// session, here a child in a group of its own that ignores SIGTERM, within
// the grace and the kill step.
func TestStopEndsEveryProcess(t *testing.T) {
	exe := testExe(t)
	for _, st := range stoppers {
		t.Run(st.name, func(t *testing.T) {
			edit := withStopper(t, st.noCgroup)
			sup := startSup(t, func(c *testConfig) { edit(c); c.StopGrace = 300 * time.Millisecond })
			sub := sup.Subscribe(1024)
			defer sub.Close()
			apply(t, sup, testApp(exe, "sticky", "regroup", true))
			lines := waitLogs(t, sub, "sticky", "join ", "child ", "ready")
			if lines[0] != "join EPERM" {
				t.Errorf("the app joining the daemon's process group: %q, want EPERM", lines[0])
			}
			cpid, _ := strconv.Atoi(strings.TrimPrefix(lines[1], "child "))
			cfd := pidfd(t, cpid)

			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			stopped, err := sup.Stop(ctx, "sticky")
			if err != nil {
				t.Fatalf("stop: %v (status %+v)", err, status(t, sup, "sticky"))
			}
			if stopped.LastExit == nil || stopped.LastExit.Signal != "SIGKILL" {
				t.Errorf("stopped with %+v, want SIGKILL after the grace", stopped.LastExit)
			}
			awaitGone(t, cfd, "the child in a process group of its own")
		})
	}
}

// TestTermReachesEveryProcess: a stop's SIGTERM reaches the app's
// processes that left its process group (and, for a broad app, its
// session), with or without a cgroup: before, only the group got it, and
// the rest died of the SIGKILL after its leader's death, with no chance
// to save anything.
func TestTermReachesEveryProcess(t *testing.T) {
	exe := testExe(t)
	for _, st := range stoppers {
		for _, app := range []struct {
			name string
			make func(exe, id, mode string) policy.App
		}{{"own-group", func(exe, id, mode string) policy.App { return testApp(exe, id, mode, true) }}, {"broad-setsid", broadSetsid}} {
			t.Run(fmt.Sprintf("%s/%s", st.name, app.name), func(t *testing.T) {
				edit := withStopper(t, st.noCgroup)
				sup := startSup(t, func(c *testConfig) { edit(c); c.StopGrace = 10 * time.Minute })
				sub := sup.Subscribe(1024)
				defer sub.Close()
				apply(t, sup, app.make(exe, "tree", "termtree"))
				waitLogs(t, sub, "tree", "child ", "ready")
				stopped := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), waitFor)
					defer cancel()
					_, err := sup.Stop(ctx, "tree")
					stopped <- err
				}()
				waitLog(t, sub, "tree", "child got SIGTERM")
				if err := <-stopped; err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestContainedAppDiesWithItsLeader: a jail app in a cgroup leaf under
// Landlock is contained (its exit kills through the leaf, without the
// scan of /proc for its session): when its main process is killed, its
// orphaned grandchild, the daemon's child now, dies with it at once (the
// grace is longer than the test waits: only the kill can end it).
func TestContainedAppDiesWithItsLeader(t *testing.T) {
	exe := testExe(t)
	cgroupOrSkip(t)
	sup := startSup(t, func(c *testConfig) { c.StopGrace = 10 * time.Minute })
	sub := sup.Subscribe(1024)
	defer sub.Close()
	apply(t, sup, jailTestApp(exe, "orph", "orphan"))
	f := strings.Fields(waitLogs(t, sub, "orph", "orphan ", "ready", "setsid: operation not permitted")[0])
	if len(f) != 4 {
		t.Fatalf("bad line %q", f)
	}
	gpid, _ := strconv.Atoi(f[1])
	gfd := pidfd(t, gpid)
	st := status(t, sup, "orph")
	if st.Stopper != StopperCgroup || st.Jail == nil || !slices.Contains(st.Jail.Layers, "landlock") {
		t.Fatalf("the app is not in a leaf under Landlock: stopper %q, jail %+v", st.Stopper, st.Jail)
	}
	if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, sub, "orph", inState(Stopped))
	awaitGone(t, gfd, "the orphan of a contained app")
	awaitReaped(t, gpid)
}
