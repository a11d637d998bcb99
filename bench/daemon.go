package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"octosup/control"
	"octosup/policy"
)

// daemon is an octosupd the bench runs in a scratch tree of its own: its
// own HOME and XDG places, manifest, control socket and NOTIFY_SOCKET.
type daemon struct {
	dir     string
	cmd     *exec.Cmd
	logf    *os.File
	exited  chan struct{} // closed when the process was reaped
	waitErr error         // set before exited closes

	// Ready is exec of octosupd → READY=1 on NOTIFY_SOCKET.
	Ready  time.Duration
	Client control.Client
}

// daemonManifest is a manifest of the given apps, checked with
// policy.Parse so that a bench that drifts from the format says so
// before any daemon starts.
func daemonManifest(apps []policy.App) ([]byte, error) {
	if apps == nil {
		apps = []policy.App{}
	}
	b, err := json.MarshalIndent(policy.Manifest{Version: 1, Apps: apps}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	if _, err := policy.Parse(b); err != nil {
		return nil, fmt.Errorf("the bench wrote a manifest octosup refuses (update bench/ to the manifest format): %w", err)
	}
	return b, nil
}

// startDaemon writes the manifest, execs octosupd with extraEnv added to
// a minimal environment, and returns once it said READY=1 (every
// autostart app started) — or with the end of its log when it exits or
// times out first.
func (e *Env) startDaemon(ctx context.Context, name string, apps []policy.App, extraEnv ...string) (*daemon, error) {
	return e.startDaemonArgs(ctx, name, apps, nil, extraEnv...)
}

// startDaemonArgs is startDaemon with more arguments for octosupd run.
func (e *Env) startDaemonArgs(ctx context.Context, name string, apps []policy.App, args []string, extraEnv ...string) (*daemon, error) {
	manifest, err := daemonManifest(apps)
	if err != nil {
		return nil, err
	}
	dir, err := e.Scratch(name)
	if err != nil {
		return nil, err
	}
	places := map[string]string{
		"HOME":            filepath.Join(dir, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
		"XDG_STATE_HOME":  filepath.Join(dir, "state"),
		"XDG_DATA_HOME":   filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME": filepath.Join(dir, "config"),
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range places {
		if err := os.MkdirAll(v, 0o700); err != nil {
			return nil, fmt.Errorf("daemon %s: %w", name, err)
		}
		env = append(env, k+"="+v)
	}
	mpath := filepath.Join(dir, "native-apps.json")
	if err := os.WriteFile(mpath, manifest, 0o600); err != nil {
		return nil, fmt.Errorf("daemon %s: write the manifest: %w", name, err)
	}
	nsock := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("daemon %s: NOTIFY_SOCKET: %w", name, err)
	}
	defer notify.Close()
	logf, err := os.Create(filepath.Join(dir, "octosupd.log"))
	if err != nil {
		return nil, fmt.Errorf("daemon %s: %w", name, err)
	}
	env = append(env, "NOTIFY_SOCKET="+nsock)
	env = append(env, extraEnv...)

	cmd := exec.Command(e.Octosupd, append([]string{"run", "--config", mpath}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The bench's death takes the daemon (and, by the jail's own
	// parent-death signal, its apps) along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d := &daemon{
		dir:    dir,
		cmd:    cmd,
		logf:   logf,
		exited: make(chan struct{}),
		Client: control.Client{Path: filepath.Join(places["XDG_RUNTIME_DIR"], "octosup", "control.sock")},
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("daemon %s: start %s: %w", name, e.Octosupd, err)
	}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	// Its exit, ctx or the timeout unblock the read below.
	timeout := time.AfterFunc(e.Timeout+time.Duration(len(apps))*e.Timeout/20, func() { notify.SetReadDeadline(time.Now()) })
	defer timeout.Stop()
	stopWatch := context.AfterFunc(ctx, func() { notify.SetReadDeadline(time.Now()) })
	defer stopWatch()
	waiting := make(chan struct{})
	defer close(waiting)
	go func() {
		select {
		case <-d.exited:
			notify.SetReadDeadline(time.Now())
		case <-waiting:
		}
	}()
	buf := make([]byte, 4096)
	for {
		n, _, err := notify.ReadFromUnix(buf)
		if err != nil {
			why := "it did not say READY=1 in time"
			select {
			case <-d.exited:
				why = fmt.Sprintf("it exited (%v)", d.waitErr)
			default:
				if ctx.Err() != nil {
					why = ctx.Err().Error()
				}
			}
			d.kill()
			return nil, fmt.Errorf("daemon %s (%s): %s; %s", name, e.Octosupd, why, d.logTail(15))
		}
		if bytes.Contains(append([]byte("\n"), buf[:n]...), []byte("\nREADY=1")) {
			d.Ready = time.Since(t0)
			return d, nil
		}
	}
}

// Pid is the daemon's pid.
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// Stop ends the daemon as systemd would (SIGTERM: it stops every app),
// SIGKILL after grace.
func (d *daemon) Stop(grace time.Duration) error {
	defer d.logf.Close()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(grace):
		d.kill()
		return fmt.Errorf("octosupd did not stop within %v of SIGTERM; killed", grace)
	}
}

func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.logf.Close()
}

// goroutineHeader is a goroutine's first line in a traceback, e.g.
// "goroutine 7 gp=0xc000 m=nil [select]:" (the gp/m/mp members since Go
// 1.23). Goroutine 0, the signal handler's g0, is not one.
var goroutineHeader = regexp.MustCompile(`(?m)^goroutine [1-9]\d* (?:[a-z]+=\S+ )*\[`)

// QuitCountGoroutines ends the daemon with SIGQUIT, on which the Go
// runtime prints every goroutine (GOTRACEBACK=all in its environment),
// and counts them. The daemon exposes no goroutine count while it runs;
// this gets one without changing it, at the price of the daemon's life.
func (d *daemon) QuitCountGoroutines(timeout time.Duration) (int, error) {
	_ = d.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-d.exited:
	case <-time.After(timeout):
		d.kill()
		return 0, fmt.Errorf("octosupd did not die of SIGQUIT within %v", timeout)
	}
	d.logf.Close()
	b, err := os.ReadFile(d.logf.Name())
	if err != nil {
		return 0, err
	}
	n := len(goroutineHeader.FindAll(b, -1))
	if n == 0 {
		return 0, fmt.Errorf("no goroutine dump in %s (does octosupd handle SIGQUIT itself now?)", d.logf.Name())
	}
	return n, nil
}

// logTail says how the daemon's log ends.
func (d *daemon) logTail(lines int) string {
	b, err := os.ReadFile(d.logf.Name())
	if err != nil {
		return "its log cannot be read: " + err.Error()
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return "it logged nothing"
	}
	all := strings.Split(text, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "its log ends:\n  " + strings.Join(all, "\n  ")
}

// appLogs is what status and logs say of an app, for an error message.
func (d *daemon) appLogs(ctx context.Context, app string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var sb strings.Builder
	var st control.StatusData
	if err := d.Client.Do(ctx, control.OpStatus, control.StatusArgs{App: app}, &st); err == nil && len(st.Apps) == 1 {
		a := st.Apps[0]
		fmt.Fprintf(&sb, "status: %s", a.State)
		if a.Reason != "" {
			fmt.Fprintf(&sb, " (%s)", a.Reason)
		}
		if a.LastExit != nil {
			fmt.Fprintf(&sb, ", last exit %s", a.LastExit)
		}
	}
	var logs control.LogsData
	if err := d.Client.Do(ctx, control.OpLogs, control.LogsArgs{App: app, Lines: 10}, &logs); err == nil {
		for _, l := range logs.Lines {
			fmt.Fprintf(&sb, "\n  %s: %s", l.Stream, l.Text)
		}
	}
	return sb.String()
}

// procStatus reads VmRSS (KiB) and Threads of a process.
func procStatus(pid int) (rssKiB, threads int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseProcStatus(bufio.NewScanner(f))
}

// parseProcStatus takes VmRSS and Threads from /proc/PID/status lines.
func parseProcStatus(sc *bufio.Scanner) (rssKiB, threads int, err error) {
	seen := 0
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch {
		case k == "VmRSS" && len(f) == 2 && f[1] == "kB":
			rssKiB, err = strconv.Atoi(f[0])
			seen |= 1
		case k == "Threads" && len(f) == 1:
			threads, err = strconv.Atoi(f[0])
			seen |= 2
		}
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %w", k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if seen != 3 {
		return 0, 0, errors.New("/proc status has no VmRSS or Threads (a kernel thread, or a zombie?)")
	}
	return rssKiB, threads, nil
}
