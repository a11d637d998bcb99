package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/jail"
)

// init makes the test binary, run as zombie-leader-child, a process
// whose thread-group leader has exited while another thread runs on:
// during init the main goroutine is on the leader thread, locked, so a
// raw exit there ends that thread alone. What is left is a "Z" process
// (its leader a zombie) that is alive: cgroup.kill passes it by (it
// signals each process's leader, exiting) and a scan of /proc sees a
// zombie. It ignores SIGTERM and leaves the app's process group, so
// only a SIGKILL to its own thread group ends it.
func init() {
	if os.Getenv(modeEnv) != "zombie-leader-child" {
		return
	}
	signal.Ignore(syscall.SIGTERM)
	// A group of its own: the app's group signal does not reach it.
	if err := syscall.Setpgid(0, 0); err != nil {
		os.Exit(1)
	}
	go func() {
		for {
			time.Sleep(time.Hour)
		}
	}()
	ready := os.NewFile(3, "ready")
	_, _ = ready.WriteString("ready")
	ready.Close()
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// zombieLeader is the app of the zombie-leader mode: it starts a
// zombie-leader-child and prints its pid.
func zombieLeader() int {
	pid, err := startReady("zombie-leader-child")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("zombie-leader", pid)
	sleepForever()
	return 0
}

// TestZombieLeaderDiesWithTheApp: an app's process whose leader thread
// exited while another thread runs on (a hostile review's probe: a
// child starts a thread, then its leader calls exit) is ended with its
// app, whether the app is stopped or its main process is killed, with a
// leaf (contained jail app or broad) and without one, started by either
// launcher. cgroup.kill alone
// did not end it, nor did the scan of /proc, which took it for a
// zombie: the app was reported stopped while the process ran on.
func TestZombieLeaderDiesWithTheApp(t *testing.T) {
	exe := testExe(t)
	for _, st := range stoppers {
		for _, app := range []struct {
			name string
			jail bool
		}{{"broad", false}, {"jail", true}} {
			for _, end := range []string{"stop", "leader killed"} {
				for _, launch := range []struct {
					name   string
					helper bool
				}{{"in-process", false}, {"helper", true}} {
					t.Run(st.name+"/"+app.name+"/"+end+"/"+launch.name, func(t *testing.T) {
						// The child ignores SIGTERM: after the short grace,
						// only the kill step can end it.
						withSt := withStopper(t, st.noCgroup)
						sup := startSup(t, func(c *testConfig) {
							withSt(c)
							c.StopGrace = 200 * time.Millisecond
							c.Launcher = jail.NewLauncher(jail.Config{UseHelper: launch.helper})
						})
						sub := sup.Subscribe(1024)
						defer sub.Close()
						a := testApp(exe, "zl", "zombie-leader", true)
						if app.jail {
							a = jailTestApp(exe, "zl", "zombie-leader")
							delete(a.Env, "SUPTEST_SETSID")
						}
						apply(t, sup, a)
						cpid := waitPid(t, sub, "zl", "zombie-leader")
						cfd := pidfd(t, cpid)
						// Positive control: the child's leader becomes a zombie
						// (it said ready just before its exit) and the process
						// is alive.
						for deadline := time.Now().Add(waitFor); ; {
							stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cpid))
							if err == nil && strings.Contains(string(stat), ") Z ") {
								break
							}
							if time.Now().After(deadline) {
								t.Fatalf("the child's /proc stat %q, %v: want its leader a zombie", stat, err)
							}
							time.Sleep(time.Millisecond)
						}
						if err := unix.PidfdSendSignal(cfd, 0, nil, 0); err != nil {
							t.Fatalf("the child is not alive: %v", err)
						}
						switch end {
						case "stop":
							ctx, cancel := context.WithTimeout(context.Background(), waitFor)
							defer cancel()
							if _, err := sup.Stop(ctx, "zl"); err != nil {
								t.Fatal(err)
							}
						case "leader killed":
							if err := unix.Kill(status(t, sup, "zl").Pid, unix.SIGKILL); err != nil {
								t.Fatal(err)
							}
							waitState(t, sub, "zl", inState(Stopped))
						}
						// Gone by the time the app is stopped, not some time
						// after.
						if err := unix.PidfdSendSignal(cfd, 0, nil, 0); err == nil {
							var pfd = []unix.PollFd{{Fd: int32(cfd), Events: unix.POLLIN}}
							if n, _ := unix.Poll(pfd, 0); n == 0 {
								t.Fatal("the child with a zombie leader still runs after its app stopped")
							}
						}
					})
				}
			}
		}
	}
}
