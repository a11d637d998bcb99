package main

import (
	"bytes"
	"context"
	"encoding/json"
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
			"for it (the kernel's teardown of the process). Both are timed alike, when a blocking system call returns " +
			"with the news: the floor's wait4, the event's read(2) on a subscribed socket the Go runtime does not poll.",
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
	sub, err := subscribeState(d.Client.SocketPath(), env.Timeout)
	if err != nil {
		return nil, err
	}
	defer sub.close()

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
func killApp(ctx context.Context, env *Env, d *daemon, conn *control.Conn, sub *stateSub, f *fifo) (time.Duration, error) {
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
	if _, err := sub.await(app, "running", pid); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %d: %w", pid, err)
	}
	at, err := sub.await(app, "stopped", 0)
	if err != nil {
		return 0, err
	}
	return at.Sub(t0), nil
}

// stateSub is a subscription to state events read with blocking read(2)
// calls on a socket that is not Go's (no netpoller, no reader goroutine,
// no channel): an event is timed when the read that brings it returns,
// as the floor is timed when its wait4 returns. control.Conn would add a
// goroutine hand-off and a channel to the event's time that the floor
// does not pay.
type stateSub struct {
	fd      int
	pending []byte // bytes read, not yet a whole line or not yet wanted
	at      time.Time
	buf     []byte
}

func subscribeState(path string, timeout time.Duration) (*stateSub, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	s := &stateSub{fd: fd, buf: make([]byte, 64<<10)}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe: SO_RCVTIMEO: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe: connect %s: %w", path, err)
	}
	req := `{"id":1,"op":"` + control.OpSubscribe + `","args":{"topics":["` + control.TopicState + `"]}}` + "\n"
	if _, err := unix.Write(fd, []byte(req)); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	line, err := s.next()
	if err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	var resp control.Response
	if err := json.Unmarshal(line, &resp); err != nil || resp.ID != 1 || !resp.OK {
		s.close()
		return nil, fmt.Errorf("subscribe answered %s", bytes.TrimSpace(line))
	}
	return s, nil
}

func (s *stateSub) close() { unix.Close(s.fd) }

// next returns the next line; s.at is the time the read that completed
// it returned.
func (s *stateSub) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(s.pending, '\n'); i >= 0 {
			line := s.pending[:i+1]
			s.pending = s.pending[i+1:]
			return line, nil
		}
		n, err := unix.Read(s.fd, s.buf)
		at := time.Now()
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return nil, errors.New("no event within the timeout")
		case err != nil:
			return nil, err
		case n == 0:
			return nil, errors.New("the daemon closed the subscription")
		}
		s.at = at
		s.pending = append(bytes.Clone(s.pending), s.buf[:n]...)
	}
}

// await returns when app's event for state (of that pid, unless 0)
// arrives, skipping every other line, with the time the read that
// brought it returned.
func (s *stateSub) await(app, state string, pid int) (time.Time, error) {
	for {
		line, err := s.next()
		if err != nil {
			return time.Time{}, fmt.Errorf("awaiting %s's %s event: %w", app, state, err)
		}
		var ev struct {
			Event string `json:"event"`
			control.StateEvent
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return time.Time{}, fmt.Errorf("decode %q: %w", bytes.TrimSpace(line), err)
		}
		if ev.Event == control.TopicState && ev.App == app && ev.State == state && (pid == 0 || ev.Pid == pid) {
			return s.at, nil
		}
	}
}
