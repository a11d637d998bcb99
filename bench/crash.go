package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/policy"
)

func crashMeasurement() Measurement {
	var n int
	return Measurement{
		Name:  "crash",
		Title: "kill -9 of an app → its stopped event (kills interleaved with the floor)",
		About: "kill(2) with SIGKILL of a running jailed hubping → the `stopped` state event on a control connection " +
			"subscribed to state, against the floor: kill(2) of a plain child of the bench and a blocking wait4(2) " +
			"for it (the kernel's teardown of the process).",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&n, "kills", 200, "kills of each kind")
		},
		Run: func(ctx context.Context, env *Env) ([]Row, error) { return runCrash(ctx, env, n) },
	}
}

func runCrash(ctx context.Context, env *Env, n int) ([]Row, error) {
	if n < 1 {
		return nil, errors.New("--kills must be at least 1")
	}
	dir, childLog, err := env.ScratchLog("crash", "children.log")
	if err != nil {
		return nil, err
	}
	defer childLog.Close()
	f, err := appFIFO(dir, "victim")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, conn, stop, err := env.startConnected(ctx, "crash-daemon", []policy.App{
		hubpingApp("victim", env.Hubping, f, jailSandbox(false), false),
	}, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	sub, err := d.Client.Subscribe(ctx, control.TopicState)
	if err != nil {
		return nil, err
	}
	defer sub.Close()

	var event, floor []time.Duration
	rows := func(err error) ([]Row, error) {
		ev := summarize(event).row("crash.event", "kill -9 → stopped event (octosupd, jailed app)")
		fl := summarize(floor).row("crash.waitpid", "floor: kill -9 → wait4 of a plain child")
		return []Row{fl, ev, ratioRow("crash.ratio", "stopped event vs floor", "event/floor p50", ev, fl, AtMost(2.0, "×"))}, err
	}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return rows(err)
		}
		if i%50 == 0 {
			env.Progressf("crash: kill %d/%d", i, n)
		}
		dt, err := killPlain(env, childLog)
		if err != nil {
			return rows(fmt.Errorf("floor, kill %d: %w", i+1, err))
		}
		floor = append(floor, dt)
		dt, err = killApp(ctx, env, d, conn, sub, f)
		if err != nil {
			return rows(fmt.Errorf("octosupd, kill %d: %w", i+1, err))
		}
		event = append(event, dt)
	}
	return rows(nil)
}

// killPlain starts hubping, waits for its hub byte (it runs), and times
// kill → the end of a blocking wait4.
func killPlain(env *Env, logw *os.File) (time.Duration, error) {
	c, err := startChild([]string{env.Hubping}, logw)
	if err != nil {
		return 0, err
	}
	if _, err := awaitByte(c.hub, env.Timeout); err != nil {
		c.kill()
		return 0, fmt.Errorf("the hub: %w", err)
	}
	defer unix.Close(c.hub)
	pid := c.cmd.Process.Pid
	t0 := time.Now()
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %d: %w", pid, err)
	}
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	dt := time.Since(t0)
	// Reaped here, so os/exec must not wait for it.
	_ = c.cmd.Process.Release()
	if err != nil {
		return 0, fmt.Errorf("wait4 %d: %w", pid, err)
	}
	return dt, nil
}

// killApp starts the app through the daemon, waits until it runs (its
// FIFO byte and its running event), and times kill → its stopped event.
func killApp(ctx context.Context, env *Env, d *daemon, conn, sub *control.Conn, f *fifo) (time.Duration, error) {
	const app = "victim"
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	var st control.StateData
	if err := conn.Do(ctx, control.OpStart, control.AppArgs{App: app}, &st); err != nil {
		return 0, fmt.Errorf("start: %w; %s", err, d.appLogs(context.Background(), app))
	}
	pid := st.App.Pid
	if pid <= 0 {
		return 0, fmt.Errorf("start answered state %s without a pid", st.State)
	}
	if _, err := f.await(env.Timeout); err != nil {
		return 0, fmt.Errorf("the FIFO: %w; %s", err, d.appLogs(context.Background(), app))
	}
	if _, err := awaitState(ctx, sub, app, "running", pid); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %d: %w", pid, err)
	}
	at, err := awaitState(ctx, sub, app, "stopped", 0)
	if err != nil {
		return 0, err
	}
	return at.Sub(t0), nil
}

// awaitState returns when the subscription delivers app's event for
// state (of that pid, unless 0), skipping every other event.
func awaitState(ctx context.Context, sub *control.Conn, app, state string, pid int) (time.Time, error) {
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return time.Time{}, fmt.Errorf("the subscription ended: %w", sub.Err())
			}
			at := time.Now()
			if ev.Name != control.TopicState {
				continue
			}
			var se control.StateEvent
			if err := ev.Decode(&se); err != nil {
				return time.Time{}, fmt.Errorf("decode a state event: %w", err)
			}
			if se.App == app && se.State == state && (pid == 0 || se.Pid == pid) {
				return at, nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no %s event for %s: %w", state, app, ctx.Err())
		}
	}
}
