package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"octosup/control"
	"octosup/internal/rig"
	"octosup/policy"
)

// daemon is an octosupd the bench runs in a scratch tree of its own: its
// own HOME and XDG places, manifest, control socket and NOTIFY_SOCKET.
// Ready (exec → READY=1), Pid and Stop are the rig's.
type daemon struct {
	*rig.Daemon
	Client control.Client
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
	dir, err := e.Scratch(name)
	if err != nil {
		return nil, err
	}
	t, err := rig.NewTree(dir, apps)
	if err != nil {
		return nil, fmt.Errorf("daemon %s: %w", name, err)
	}
	// Every autostart app is started before READY=1: more apps, more time.
	timeout := e.Timeout + time.Duration(len(apps))*e.Timeout/20
	d, err := rig.Start(ctx, e.Octosupd, t, rig.Options{Args: args, Env: extraEnv, Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("daemon %s: %w", name, err)
	}
	return &daemon{Daemon: d, Client: control.Client{Path: t.Socket}}, nil
}

// startConnected is startDaemonArgs with one control connection to the
// daemon; stop closes the connection, then stops the daemon.
func (e *Env) startConnected(ctx context.Context, name string, apps []policy.App, args []string) (d *daemon, conn *control.Conn, stop func(), err error) {
	if d, err = e.startDaemonArgs(ctx, name, apps, args); err != nil {
		return nil, nil, nil, err
	}
	if conn, err = d.Client.Connect(ctx); err != nil {
		_ = d.Stop(30 * time.Second)
		return nil, nil, nil, err
	}
	return d, conn, func() {
		conn.Close()
		_ = d.Stop(30 * time.Second)
	}, nil
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
	_ = d.Signal(syscall.SIGQUIT)
	select {
	case <-d.Exited():
	case <-time.After(timeout):
		d.Kill()
		return 0, fmt.Errorf("octosupd did not die of SIGQUIT within %v", timeout)
	}
	b, err := os.ReadFile(d.LogPath())
	if err != nil {
		return 0, err
	}
	n := len(goroutineHeader.FindAll(b, -1))
	if n == 0 {
		return 0, fmt.Errorf("no goroutine dump in %s (does octosupd handle SIGQUIT itself now?)", d.LogPath())
	}
	return n, nil
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
