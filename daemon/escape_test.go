package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/internal/asnobody"
)

// orphanApp is the app of TestOrphanIsRefused (DAEMON_TEST_ORPHAN), the
// adversarial review's first probe, by stage (PROBE_EXE is this binary: a
// child of the app may not read /proc/self):
//
//   - "probe", the app: asks the control socket itself ("self LINE"),
//     runs the child and lives on.
//   - "child": calls setsid ("setsid ok" or "setsid ERRNO"), starts the
//     grandchild, and exits once the grandchild runs.
//   - "grandchild": waits on a pidfd of its parent until the parent has
//     exited, says who its parent is now ("orphan PPID"), and asks the
//     control socket to stop the other app ("answer LINE").
//   - "ask": only asks (the test's control, run outside every app).
func orphanApp(stage string) int {
	path := os.Getenv("PROBE_CONTROL")
	switch stage {
	case "probe":
		fmt.Println("self", askStop(path))
		cmd := exec.Command(os.Getenv("PROBE_EXE"))
		cmd.Env = append(os.Environ(), "DAEMON_TEST_ORPHAN=child")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Println("child:", err)
		}
		for {
			time.Sleep(time.Hour)
		}
	case "child":
		_, err := unix.Setsid()
		fmt.Println("setsid", errName(err))
		r, w, err := os.Pipe()
		if err != nil {
			fmt.Println("pipe:", err)
			return 1
		}
		cmd := exec.Command(os.Getenv("PROBE_EXE"))
		cmd.Env = append(os.Environ(), "DAEMON_TEST_ORPHAN=grandchild")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{w}
		if err := cmd.Start(); err != nil {
			fmt.Println("grandchild:", err)
			return 1
		}
		w.Close()
		// The grandchild's pidfd on this process must be open before it
		// exits: wait for its word.
		if _, err := r.Read(make([]byte, 1)); err != nil {
			fmt.Println("grandchild said nothing:", err)
		}
		return 0
	case "grandchild":
		parent, err := unix.PidfdOpen(os.Getppid(), 0)
		if err != nil {
			fmt.Println("pidfd_open:", err)
			return 1
		}
		os.NewFile(3, "ready").Close() // the child may exit now
		// Readable once the parent has exited: by then its children
		// have a new parent.
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(parent), Events: unix.POLLIN}}, -1)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EINTR) {
				fmt.Println("poll:", err)
				return 1
			}
		}
		fmt.Println("orphan", os.Getppid())
		fmt.Println("answer", askStop(path))
		for {
			time.Sleep(time.Hour)
		}
	case "ask":
		fmt.Println(askStop(path))
		return 0
	}
	return 2
}

// askStop connects to the control socket at path, asks it to stop app
// "victim", and returns the first line it answers, or the error.
func askStop(path string) string {
	nc, err := net.Dial("unix", path)
	if err != nil {
		return "connect " + errName(err)
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"id":1,"op":"stop","args":{"app":"victim"}}`)
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		return "read " + errName(err)
	}
	return strings.TrimSpace(line)
}

func errName(err error) string {
	var errno unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// TestOrphanIsRefused is the review's first escape end to end: a real
// daemon, its real control socket, a jailed app (network full, so that
// it may connect at all; processes true) whose grandchild outlives its
// parent. Before the daemon was the apps' subreaper that grandchild was
// re-parented to init, where the peer walk ended: it was served, and
// stopped the other app. Both launchers; as root with the cgroup
// stopper here, and as nobody without a cgroup (TestAsNobody).
func TestOrphanIsRefused(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, launcher := range []struct {
		name   string
		helper bool
	}{{"in-process", false}, {"helper", true}} {
		for _, policy := range []string{"jail", "broad"} {
			t.Run(launcher.name+"/"+policy, func(t *testing.T) {
				env := newTestEnv(t)
				control := env.dirs.ControlSocket()
				env.writeManifest(t, []byte(fmt.Sprintf(`{"version":1,"apps":[
					{"id":"probe","exec":[%q],"env":{"DAEMON_TEST_ORPHAN":"probe","PROBE_CONTROL":%q,"PROBE_EXE":%q,"GORACE":"atexit_sleep_ms=0"},
					 "sandbox":{"policy":%q,"network":"full","processes":true},"storage":{"jail":true}},
					{"id":"victim","exec":["/bin/sleep","1000"],"autostart":true,"sandbox":{"policy":"broad"}}]}`,
					exe, control, exe, policy)))
				d := startDaemonConfig(t, env, func(c *Config) { c.Jail.UseHelper = launcher.helper })
				logs := followLogs(t, d.client, "probe")
				startApp(t, d.client, "probe")

				// A jail app's connect to the control socket is refused by
				// the jail itself now (the guard decides every unix connect
				// of a network full app below Landlock ABI 9): EACCES, or
				// the peer check's refusal where the connect went through.
				refused := func(what, line string) {
					t.Helper()
					if policy == "jail" && strings.HasSuffix(line, "connect EACCES") {
						return
					}
					wantRefused(t, what, line)
				}
				self := appSaw(t, logs, "self ")
				refused("the app's own connection", self)
				setsid := appSaw(t, logs, "setsid ")
				if want := map[string]string{"jail": "setsid EPERM", "broad": "setsid ok"}[policy]; setsid != want {
					t.Errorf("%q, want %q", setsid, want)
				}
				orphan := appSaw(t, logs, "orphan ")
				if orphan != fmt.Sprintf("orphan %d", os.Getpid()) {
					t.Errorf("%q: the orphan was not re-parented to the daemon (%d)", orphan, os.Getpid())
				}
				refused("the orphan's connection", appSaw(t, logs, "answer "))
				if st := status(t, d.client)["victim"]; st.State != "running" {
					t.Fatalf("victim is %s after the orphan's stop", st.State)
				}

				// The control: the same request from outside every app is
				// served, and stops the victim.
				cmd := exec.Command(exe)
				cmd.Env = []string{"DAEMON_TEST_ORPHAN=ask", "PROBE_CONTROL=" + control, "GORACE=atexit_sleep_ms=0"}
				out, err := cmd.Output()
				if err != nil || !strings.Contains(string(out), `"ok":true`) {
					t.Fatalf("the control's stop: %v: %s", err, out)
				}
				if st := status(t, d.client)["victim"]; st.State != "stopped" {
					t.Fatalf("victim is %s after the control's stop", st.State)
				}
			})
		}
	}
}

func wantRefused(t *testing.T, what, line string) {
	t.Helper()
	if !strings.Contains(line, `"code":"not_permitted"`) {
		t.Errorf("%s was not refused: %s", what, line)
	}
}

func startApp(t *testing.T, c *control.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sd control.StateData
	if err := c.Do(ctx, control.OpStart, control.AppArgs{App: id}, &sd); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
}

// TestAsNobody re-runs TestOrphanIsRefused as an unprivileged user: a
// daemon run by a person, with no cgroup to make, whose apps are found
// by their sessions and its subreaping alone.
func TestAsNobody(t *testing.T) {
	out := asnobody.Run(t, "^TestOrphanIsRefused$")
	asnobody.WantPassed(t, out, "TestOrphanIsRefused/in-process/jail", "TestOrphanIsRefused/in-process/broad",
		"TestOrphanIsRefused/helper/jail", "TestOrphanIsRefused/helper/broad")
	// Without a cgroup: the refusal is the subreaper's.
	if !strings.Contains(out, "is an orphan of an app") {
		t.Errorf("as nobody the orphan was not refused as one:\n%s", out)
	}
}
