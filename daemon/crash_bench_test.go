package daemon

import (
	"context"
	"fmt"
	"runtime/trace"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
)

// BenchmarkCrashEvent is make bench's crash section with the daemon in
// this process (Run, as octosupd run runs it) and the app a real jailed
// process: kill -9 of the app → its stopped event on a connection
// subscribed to state. octosupd has no profiling switch, so this is how
// the daemon's side of a crash gets an execution trace or a profile:
//
//	go test -run '^$' -bench CrashEvent -benchtime 300x -trace crash.trace ./daemon
//	go tool trace crash.trace
//
// The client is in the trace too. p50-µs is the median; compare with the
// supervisor's BenchmarkKillWaitpid, the floor.
func BenchmarkCrashEvent(b *testing.B) {
	env := newTestEnv(b)
	env.writeManifest(b, []byte(`{"version":1,"apps":[{"id":"victim","exec":["/bin/sleep","3600"],
		"grants":{},"sandbox":{"policy":"jail","network":"none","processes":false}}]}`))
	d := startDaemon(b, env)
	ctx := context.Background()
	sub, err := d.client.Subscribe(ctx, control.TopicState)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	conn, err := d.client.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		var st control.StateData
		if err := conn.Do(ctx, control.OpStart, control.AppArgs{App: "victim"}, &st); err != nil {
			b.Fatal(err)
		}
		if _, err := awaitAppState(sub, "victim", "running"); err != nil {
			b.Fatal(err)
		}
		trace.Log(ctx, "crash", "kill") // where each round's trace starts
		t0 := time.Now()
		if err := unix.Kill(st.App.Pid, unix.SIGKILL); err != nil {
			b.Fatal(err)
		}
		at, err := awaitAppState(sub, "victim", "stopped")
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, at.Sub(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

// awaitAppState returns when sub delivers app's state event for state,
// with the time it arrived.
func awaitAppState(sub *control.Conn, app, state string) (time.Time, error) {
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return time.Time{}, fmt.Errorf("the subscription ended: %w", sub.Err())
			}
			at := time.Now()
			var se control.StateEvent
			if ev.Name != control.TopicState || ev.Decode(&se) != nil {
				continue
			}
			if se.App == app && se.State == state {
				return at, nil
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("no %s event for %s within 10s", state, app)
		}
	}
}
