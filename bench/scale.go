package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/policy"
)

func scaleMeasurement() Measurement {
	sizes := "10,100,500"
	var calls int
	return Measurement{
		Name:  "scale",
		Title: "a daemon with N idle jailed apps (autostart), against the same daemon with none",
		About: "For each N, a fresh octosupd with N autostarting hubpings (jail, network none, processes false): " +
			"exec → READY=1 on NOTIFY_SOCKET, VmRSS and Threads from /proc (per app: the difference with the " +
			"empty daemon, divided by N), status latency over all apps (as the shell polls it, and with \"usage\": true, " +
			"which reads each app's counters), and goroutines, counted from the Go " +
			"runtime's SIGQUIT dump at the end.",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&sizes, "scale", sizes, "numbers of apps, comma-separated (the empty daemon is always measured)")
			fs.IntVar(&calls, "status-calls", 200, "status calls at each size")
		},
		Run: func(ctx context.Context, env *Env) ([]Row, error) {
			ns, err := parseSizes(sizes)
			if err != nil {
				return nil, err
			}
			if calls < 1 {
				return nil, errors.New("--status-calls must be at least 1")
			}
			return runScale(ctx, env, ns, calls)
		},
	}
}

// parseSizes reads --scale: positive integers, comma-separated.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 5000 {
			return nil, fmt.Errorf("--scale: %q is not a number of apps from 1 to 5000", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--scale: no size given (e.g. --scale 10,100,500)")
	}
	return out, nil
}

// scalePoint is what one daemon of N apps measured.
type scalePoint struct {
	n          int
	ready      time.Duration
	rssKiB     int
	threads    int
	goroutines int
	status     Summary
	usage      Summary // status with "usage": true
	survivors  int     // apps still alive 5 s after the daemon died
}

func runScale(ctx context.Context, env *Env, sizes []int, calls int) ([]Row, error) {
	base, err := scaleOnce(ctx, env, 0, calls)
	if err != nil {
		return nil, fmt.Errorf("the empty daemon: %w", err)
	}
	rows := []Row{
		{Key: "scale.0.ready", Label: "0 apps: exec → READY=1", Value: Ms(base.ready)},
		{Key: "scale.0.rss", Label: "0 apps: daemon RSS", Value: &Value{X: float64(base.rssKiB), Unit: "KiB"}},
		{Key: "scale.0.threads", Label: "0 apps: daemon threads", Value: &Value{X: float64(base.threads), Unit: "threads"}},
		{Key: "scale.0.goroutines", Label: "0 apps: daemon goroutines", Value: &Value{X: float64(base.goroutines), Unit: "goroutines"}},
		base.status.row("scale.0.status", "0 apps: status"),
	}
	jailSpawn, haveSpawn := env.Earlier("spawn.jail")
	for _, n := range sizes {
		p, err := scaleOnce(ctx, env, n, calls)
		if err != nil {
			return rows, fmt.Errorf("%d apps: %w", n, err)
		}
		pre := fmt.Sprintf("%d apps: ", n)
		key := fmt.Sprintf("scale.%d.", n)
		per := func(x, x0 int) float64 { return float64(x-x0) / float64(n) }

		ready := Row{Key: key + "ready", Label: pre + "exec → READY=1 (all started)", Value: Ms(p.ready),
			Note: fmt.Sprintf("%v per app beyond the empty daemon", ((p.ready - base.ready) / time.Duration(n)).Round(10*time.Microsecond))}
		if haveSpawn && jailSpawn.P50 != nil {
			perApp := Row{Value: Ms((p.ready - base.ready) / time.Duration(n))}
			if r := ratioRow("", "", "per app / c p50", perApp, jailSpawn, nil); r.Ratio != nil {
				ready.Ratio = r.Ratio
				ready.Note += ", against the p50 of one jailed start (c) in the spawn section"
			}
		}
		rss := Row{Key: key + "rss", Label: pre + "daemon RSS per app", Value: &Value{X: per(p.rssKiB, base.rssKiB), Unit: "KiB/app"},
			Note: fmt.Sprintf("VmRSS %d KiB, %d KiB without apps", p.rssKiB, base.rssKiB)}
		if n >= 500 {
			rss.Goal = AtMost(100, "KiB/app")
		}
		rss.finish()
		threads := Row{Key: key + "threads", Label: pre + "daemon threads per app", Value: &Value{X: per(p.threads, base.threads), Unit: "threads/app"},
			Note: fmt.Sprintf("%d threads, %d without apps", p.threads, base.threads)}
		gor := Row{Key: key + "goroutines", Label: pre + "daemon goroutines per app", Value: &Value{X: per(p.goroutines, base.goroutines), Unit: "goroutines/app"},
			Note: fmt.Sprintf("%d goroutines, %d without apps", p.goroutines, base.goroutines)}
		if p.survivors > 0 {
			gor.Note += fmt.Sprintf("; %d apps were still alive 5 s after the daemon died (killed by the bench)", p.survivors)
		}
		st := p.status.row(key+"status", pre+"status (all apps)")
		if r := ratioRow("", "", "÷ 0 apps p50", st, rows[4], nil); r.Ratio != nil {
			st.Ratio = r.Ratio
		}
		withUsage := p.usage.row(key+"status_usage", pre+"status with usage (all apps)")
		rows = append(rows, ready, rss, threads, gor, st, withUsage)
	}
	return rows, nil
}

// scaleOnce runs one daemon of n autostarting apps and measures it, in
// this order: READY=1, /proc (idle, before any request), status latency,
// goroutines (which ends the daemon).
func scaleOnce(ctx context.Context, env *Env, n, calls int) (scalePoint, error) {
	env.Progressf("scale: %d apps", n)
	apps := make([]policy.App, n)
	for i := range apps {
		apps[i] = hubpingApp(fmt.Sprintf("app-%04d", i), env.Hubping, nil, jailSandbox(false), true)
	}
	d, err := env.startDaemon(ctx, fmt.Sprintf("scale-%d", n), apps, "GOTRACEBACK=all")
	if err != nil {
		return scalePoint{}, err
	}
	quit := false
	defer func() {
		if !quit {
			d.Stop(30 * time.Second)
		}
	}()
	p := scalePoint{n: n, ready: d.Ready}
	if p.rssKiB, p.threads, err = procStatus(d.Pid()); err != nil {
		return p, fmt.Errorf("octosupd's /proc status: %w", err)
	}

	conn, err := d.Client.Connect(ctx)
	if err != nil {
		return p, err
	}
	defer conn.Close()
	var last control.StatusData
	for _, x := range []struct {
		args control.StatusArgs
		to   *Summary
	}{{control.StatusArgs{}, &p.status}, {control.StatusArgs{Usage: true}, &p.usage}} {
		lat := make([]time.Duration, 0, calls)
		for range calls {
			t0 := time.Now()
			if err := conn.Do(ctx, control.OpStatus, x.args, &last); err != nil {
				return p, fmt.Errorf("status: %w", err)
			}
			lat = append(lat, time.Since(t0))
		}
		*x.to = summarize(lat)
	}
	var pidfds []int
	defer func() {
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}()
	for _, a := range last.Apps {
		if a.State != "running" {
			return p, fmt.Errorf("app %s is %s, not running (%s): every autostart app should run after READY=1", a.ID, a.State, a.Reason)
		}
		if fd, err := unix.PidfdOpen(a.Pid, 0); err == nil {
			pidfds = append(pidfds, fd)
		}
	}
	if len(last.Apps) != n {
		return p, fmt.Errorf("status lists %d apps, the manifest %d", len(last.Apps), n)
	}

	quit = true
	if p.goroutines, err = d.QuitCountGoroutines(30 * time.Second); err != nil {
		return p, err
	}
	p.survivors = reapSurvivors(pidfds, 5*time.Second)
	return p, nil
}

// reapSurvivors waits up to grace for the processes behind pidfds to end
// (the jail's parent-death signal, once the daemon died) and kills those
// that did not; it returns how many it had to kill.
func reapSurvivors(pidfds []int, grace time.Duration) int {
	deadline := time.Now().Add(grace)
	killed := 0
	for _, fd := range pidfds {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			left := time.Until(deadline)
			n, err := unix.Poll(pfd, max(0, int(left/time.Millisecond)))
			if err == unix.EINTR {
				continue
			}
			if err == nil && n == 0 {
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				killed++
			}
			break
		}
	}
	return killed
}
