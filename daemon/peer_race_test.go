package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/jail"
	"octosup/supervisor"
)

// The attack these tests replay: an app forks a child; the child connects
// a socket the parent made to the control socket and exits; the parent
// waits until the child is reaped and only then uses the connection. A
// check that looks the peer's pid up after the fact finds no process
// there and lets the app in.

// connectChild is the forked child of raceApp (DAEMON_TEST_CONNECT): it
// connects fd 3, a socket its parent made, to the control socket and
// exits at once.
func connectChild(path string) int {
	if err := unix.Connect(3, &unix.SockaddrUnix{Name: path}); err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	return 0
}

// raceApp is the app of the race tests (DAEMON_TEST_RACEAPP): each of
// RACE_ROUNDS rounds makes a socket, has a child (this binary again,
// connectChild) connect it to RACE_CONTROL and exit, waits for the child
// to be reaped, then uses the connection: op status ("status"), or
// approvals and then approve of its own consent approval ("approve"). It
// prints one line a round ("round N refused MESSAGE", "round N answered
// LINE", "round N approved ID", or "round N failed ERROR") and "race done"
// at the end, then lives on until stopped.
//
// With RACE_HUB=1 it first asks for a session on its hub, which raises
// its first-use consent approval; with RACE_WAIT=1 it starts the rounds
// on SIGUSR1. With RACE_MOVER=1 the app's main process only forks the
// process that does all that (RACE_MOVER=2), in a session of its own; that
// one prints "mover PID", waits for SIGUSR1 (the test moves it out of the
// app's cgroup meanwhile), and before the rounds uses a connection of its
// own: "self refused MESSAGE" or "self answered LINE".
func raceApp() int {
	hub := os.NewFile(3, "hub")
	mover := os.Getenv("RACE_MOVER")
	if mover == "1" {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), "RACE_MOVER=2")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Run(); err != nil {
			fmt.Println("mover:", err)
		}
		_, _ = io.Copy(io.Discard, hub)
		return 0
	}
	var start chan os.Signal
	if os.Getenv("RACE_WAIT") == "1" || mover == "2" {
		start = make(chan os.Signal, 1)
		signal.Notify(start, syscall.SIGUSR1)
	}
	if mover == "2" {
		fmt.Println("mover", os.Getpid())
	}
	if os.Getenv("RACE_HUB") == "1" {
		frame := `{"octos_peer":{"type":"request","req_id":"open-1","method":"octos.session.open","args":{"title":"race"}}}` + "\n"
		if _, err := hub.WriteString(frame); err != nil {
			fmt.Println("hub write:", err)
			return 1
		}
		fmt.Println("asked for a session")
	}
	if start != nil {
		<-start
	}
	path := os.Getenv("RACE_CONTROL")
	if mover == "2" {
		fmt.Println("self", selfRound(path))
	}
	rounds, _ := strconv.Atoi(os.Getenv("RACE_ROUNDS"))
	for i := range rounds {
		fmt.Printf("round %d %s\n", i, raceRound(path, os.Getenv("DAEMON_TEST_RACEAPP")))
	}
	fmt.Println("race done")
	// It lives on until stopped: an app's approval ends with its process.
	_, _ = io.Copy(io.Discard, hub)
	return 0
}

// selfRound asks for status on a connection of the process's own.
func selfRound(path string) string {
	nc, err := net.Dial("unix", path)
	if err != nil {
		return "failed dial: " + err.Error()
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"id":1,"op":"status"}`)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := bufio.NewReader(nc).ReadBytes('\n')
	if err != nil {
		return "failed read: " + err.Error()
	}
	var resp control.Response
	if json.Unmarshal(b, &resp) == nil && !resp.OK && resp.Error != nil && resp.Error.Code == control.CodeNotPermitted {
		return "refused " + resp.Error.Message
	}
	return "answered " + strings.TrimSpace(string(b))
}

// raceRound is one round of raceApp, and what came of it.
func raceRound(path, op string) string {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "failed socket: " + err.Error()
	}
	f := os.NewFile(uintptr(fd), "race")
	child := exec.Command("/proc/self/exe")
	child.Env = append(os.Environ(), "DAEMON_TEST_CONNECT="+path)
	child.ExtraFiles = []*os.File{f}
	child.Stderr = os.Stderr
	// Run returns once the child has exited and been reaped.
	if err := child.Run(); err != nil {
		f.Close()
		return "failed child: " + err.Error()
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return "failed conn: " + err.Error()
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	ask := func(line string) (control.Response, string, error) {
		// A write to a connection the daemon already closed fails; what
		// it wrote before is still there to read.
		_, _ = nc.Write([]byte(line + "\n"))
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := r.ReadBytes('\n')
		if err != nil {
			return control.Response{}, "", err
		}
		var resp control.Response
		if err := json.Unmarshal(b, &resp); err != nil {
			return control.Response{}, "", fmt.Errorf("not an answer: %q", b)
		}
		return resp, strings.TrimSpace(string(b)), nil
	}
	first := `{"id":1,"op":"status"}`
	if op == "approve" {
		first = `{"id":1,"op":"approvals"}`
	}
	resp, line, err := ask(first)
	switch {
	case err != nil:
		return "failed read: " + err.Error()
	case !resp.OK && resp.Error != nil && resp.Error.Code == control.CodeNotPermitted:
		return "refused " + resp.Error.Message
	case op != "approve":
		return "answered " + line
	}
	var list control.ApprovalsData
	if err := json.Unmarshal(resp.Data, &list); err != nil {
		return "answered " + line
	}
	for _, a := range list.Approvals {
		if a.Kind != "consent" || a.State != "pending" {
			continue
		}
		b, _ := json.Marshal(control.Request{ID: 2, Op: control.OpApprove, Args: mustJSON(control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow"})})
		if resp, line, err := ask(string(b)); err == nil && resp.OK {
			return "approved " + a.ApprovalID
		} else {
			return fmt.Sprintf("answered %s, then approve: %s %v", first, line, err)
		}
	}
	return "answered " + line
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// raceOutcomes reads the rounds of raceApp from its log until "race
// done", and fails the test on any round that was answered. It returns
// the refusals' messages.
func raceOutcomes(t *testing.T, logs *logFollow, rounds int) []string {
	t.Helper()
	var refusals []string
	for {
		line := appSaw(t, logs, "")
		if line == "race done" {
			break
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 || f[0] != "round" {
			continue
		}
		switch f[2] {
		case "refused":
			refusals = append(refusals, f[3])
		default:
			t.Errorf("%s", line)
		}
	}
	if len(refusals) != rounds && !t.Failed() {
		t.Fatalf("%d refusals of %d rounds", len(refusals), rounds)
	}
	return refusals
}

const raceRounds = 50

// TestAppChildsConnectionIsRefused: the race itself, 50 times, against
// the real daemon and a real app. Every round is refused, each with a
// reason; the test process and a process it forks outside every app are
// served as before.
func TestAppChildsConnectionIsRefused(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(`{"version":1,"apps":[{"id":"racer","exec":[%q],
		"env":{"DAEMON_TEST_RACEAPP":"status","RACE_CONTROL":%q,"RACE_ROUNDS":"%d","GORACE":"atexit_sleep_ms=0"},
		"grants":{},"sandbox":{"policy":"broad","network":"full","processes":true},"storage":{}}]}`,
		exe, env.dirs.ControlSocket(), raceRounds)))
	d := startDaemon(t, env)
	logs := followLogs(t, d.client, "racer")
	if err := d.client.Do(context.Background(), control.OpStart, control.AppArgs{App: "racer"}, nil); err != nil {
		t.Fatalf("start racer: %v", err)
	}
	for _, msg := range raceOutcomes(t, logs, raceRounds) {
		// Checked while the child ran, it is in the app; checked after,
		// it is gone. Either way it is refused for what it is.
		if !strings.Contains(msg, `app "racer"`) && !strings.Contains(msg, "exited") {
			t.Errorf("refusal %q names neither the app nor the exit", msg)
		}
	}

	// Positive controls: the test process, and a child of it that is in
	// no app, are served.
	status(t, d.client)
	cmd := exec.Command(exe)
	cmd.Env = []string{"OCTOSUP_TEST_DIAL=" + env.dirs.ControlSocket(), "GORACE=atexit_sleep_ms=0"}
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("an outside client: %v", err)
	}
	var resp control.Response
	if err := json.Unmarshal(b, &resp); err != nil || !resp.OK {
		t.Fatalf("an outside client was answered %s (%v), want its status", b, err)
	}
}

// TestAppCannotApproveItsOwnConsent: an app that raised a first-use
// consent approval tries, through its own forked-and-exited child's
// connection, to list and approve it. Every round is refused, and the
// approval stays pending with nothing persisted.
func TestAppCannotApproveItsOwnConsent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(`{"version":1,"apps":[{"id":"chat","exec":[%q],"autostart":true,
		"env":{"DAEMON_TEST_RACEAPP":"approve","RACE_HUB":"1","RACE_WAIT":"1","RACE_CONTROL":%q,"RACE_ROUNDS":"%d","GORACE":"atexit_sleep_ms=0"},
		"grants":{"services":["agent.octos"],"methods":["octos.session.open"]},
		"sandbox":{"policy":"broad","network":"full","processes":true},"storage":{}}]}`,
		exe, env.dirs.ControlSocket(), raceRounds)))
	d := startDaemon(t, env)
	ctx := context.Background()
	sub := approvalEvents(t, d.client)
	logs := followLogs(t, d.client, "chat")
	a := pendingConsent(t, d.client, sub, "chat")
	st := status(t, d.client)["chat"]
	if st.Pid == 0 {
		t.Fatalf("chat runs with no pid: %+v", st)
	}
	if err := unix.Kill(st.Pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	raceOutcomes(t, logs, raceRounds)

	var list control.ApprovalsData
	if err := d.client.Do(ctx, control.OpApprovals, nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Approvals) != 1 || list.Approvals[0].ApprovalID != a.ApprovalID || list.Approvals[0].State != "pending" {
		t.Fatalf("approvals after the race: %+v, want %s still pending", list.Approvals, a.ApprovalID)
	}
	var cons control.ConsentData
	if err := d.client.Do(ctx, control.OpConsent, control.ConsentArgs{Action: "list"}, &cons); err != nil || len(cons.Consents) != 0 {
		t.Fatalf("consents after the race: %v %+v, want none", err, cons)
	}
}

// TestMovedOutOfItsLeafIsRefused: a process of an app that left the
// app's process group (setsid) and was moved out of its cgroup leaf into
// the daemon's own cgroup still descends from the app: its own connection
// is refused, and so is each of its forked-and-exited children's, born
// outside the apps' cgroups.
func TestMovedOutOfItsLeafIsRefused(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(`{"version":1,"apps":[{"id":"mover","exec":[%q],
		"env":{"DAEMON_TEST_RACEAPP":"status","RACE_MOVER":"1","RACE_CONTROL":%q,"RACE_ROUNDS":"%d","GORACE":"atexit_sleep_ms=0"},
		"grants":{},"sandbox":{"policy":"broad","network":"full","processes":true},"storage":{}}]}`,
		exe, env.dirs.ControlSocket(), raceRounds)))
	d := startDaemon(t, env)
	logs := followLogs(t, d.client, "mover")
	var sd control.StateData
	if err := d.client.Do(context.Background(), control.OpStart, control.AppArgs{App: "mover"}, &sd); err != nil {
		t.Fatalf("start mover: %v", err)
	}
	if sd.App.Stopper != "cgroup" {
		t.Skipf("stopper %q: no cgroup leaf to move out of (run as root, or under systemd with Delegate=yes)", sd.App.Stopper)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(appSaw(t, logs, "mover "), "mover "))
	if err != nil {
		t.Fatal(err)
	}
	mnt, own := cgroup2Of(t, "self")
	if err := os.WriteFile(mnt+own+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatalf("move %d out of its leaf: %v", pid, err)
	}
	if _, now := cgroup2Of(t, strconv.Itoa(pid)); now != own {
		t.Fatalf("process %d is in %s after the move, want the daemon's %s", pid, now, own)
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	self := appSaw(t, logs, "self ")
	if want := fmt.Sprintf(`descends from process %d, which belongs to app "mover"`, sd.App.Pid); !strings.HasPrefix(self, "self refused ") || !strings.Contains(self, want) {
		t.Errorf("%s; want refused, saying %q", self, want)
	}
	for _, msg := range raceOutcomes(t, logs, raceRounds) {
		if !strings.Contains(msg, fmt.Sprintf(`descends from process %d, which belongs to app "mover"`, sd.App.Pid)) && !strings.Contains(msg, "exited") {
			t.Errorf("refusal %q names neither the app's process nor the exit", msg)
		}
	}
}

// cgroup2Of is the cgroup v2 mount point and the cgroup of /proc/<pid>.
func cgroup2Of(t *testing.T, pid string) (mnt, cg string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		if f := strings.Fields(pre); strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 && f[3] == "/" {
			mnt = f[4]
			break
		}
	}
	if b, err = os.ReadFile("/proc/" + pid + "/cgroup"); err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			cg = rel
		}
	}
	if mnt == "" || cg == "" {
		t.Fatalf("no cgroup v2 for process %s", pid)
	}
	return strings.TrimSuffix(mnt, "/"), cg
}

// supervisedServer is a control server with the real supervisor (no
// apps) on a socket it listens on at once, and serves from serve on: a
// test connects first, so that the check runs when it says. Without
// SO_PEERPIDFD it finds peers as on a kernel before 6.5.
func supervisedServer(t *testing.T, withoutPeerPidfd bool) (path string, serve func()) {
	t.Helper()
	sup, err := supervisor.New(supervisor.Config{Launcher: jail.NewLauncher(jail.Config{}), Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(ctx) }()
	path = filepath.Join(t.TempDir(), "octosup", "control.sock")
	ln, err := listenUnix(ctx, path, true)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{Apps: sup, Log: testLogger(t)})
	if withoutPeerPidfd {
		srv.peerPidfd = func(int) (int, error) { return -1, unix.ENOPROTOOPT }
	}
	done := make(chan error, 1)
	served := false
	t.Cleanup(func() {
		cancel()
		if served {
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		} else {
			ln.Close()
		}
		<-supDone
	})
	return path, func() {
		served = true
		go func() { done <- srv.Serve(ctx, ln) }()
	}
}

// connectedByChild has a child process (this binary, connectChild)
// connect a socket to path and exit; reap says whether the child is
// reaped before it returns, or left a zombie (then reaped at the end of
// the test).
func connectedByChild(t *testing.T, path string, reap bool) (net.Conn, int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "connected")
	defer f.Close()
	cmd := exec.Command(exe)
	cmd.Env = []string{"DAEMON_TEST_CONNECT=" + path, "GORACE=atexit_sleep_ms=0"}
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Not reaped before Wait: the pid is the child's.
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if reap {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the child: %v", err)
		}
	} else {
		t.Cleanup(func() { cmd.Wait() })
	}
	nc, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, cmd.Process.Pid
}

// TestPeerGoneOrZombieIsRefused: a connection whose maker is gone, or is
// a zombie, by the time the daemon checks it is refused, though the maker
// was in no app: the daemon cannot show that it was outside every app.
// The test process itself is served (the positive control). Each case
// runs with SO_PEERPIDFD and without it (pidfd_open of the pid).
func TestPeerGoneOrZombieIsRefused(t *testing.T) {
	for _, how := range []string{"SO_PEERPIDFD", "pidfd_open"} {
		for _, c := range []struct {
			name string
			reap bool
			want string
		}{
			{"gone", true, "exited before the daemon could check it"},
			{"zombie", false, "has exited (a zombie)"},
		} {
			t.Run(how+"/"+c.name, func(t *testing.T) {
				path, serve := supervisedServer(t, how == "pidfd_open")
				nc, pid := connectedByChild(t, path, c.reap)
				serve()
				fmt.Fprintln(nc, `{"id":1,"op":"status"}`)
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				b, err := bufio.NewReader(nc).ReadBytes('\n')
				if err != nil {
					t.Fatal(err)
				}
				var resp control.Response
				if err := json.Unmarshal(b, &resp); err != nil || resp.OK || resp.Error == nil || resp.Error.Code != control.CodeNotPermitted ||
					!strings.Contains(resp.Error.Message, fmt.Sprintf("process %d cannot be placed outside every app: ", pid)) || !strings.Contains(resp.Error.Message, c.want) {
					t.Fatalf("answered %s; want not_permitted saying %q", b, c.want)
				}
				// An outside client that runs is served.
				var d control.StatusData
				if err := (&control.Client{Path: path}).Do(context.Background(), control.OpStatus, nil, &d); err != nil {
					t.Fatalf("the test process: %v", err)
				}
			})
		}
	}
}
