package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"octosup/control"
	octosupd "octosup/daemon"
	"octosup/internal/rig"
	"octosup/jail"
	"octosup/policy"
)

// BenchmarkToolCallInProcess is the tools section's tool call with the
// daemon run in this process (daemon.Run, as octosupd run runs it) and
// the tool app a real process, jailed: octosupd has no profiling switch,
// so this is how the daemon's side of a call gets a CPU profile:
//
//	go test -run '^$' -bench ToolCallInProcess -benchtime 20000x -cpuprofile cpu.out ./bench
//	go tool pprof -top -focus 'octosup/(daemon|peer)' bench.test cpu.out
//
// The kernel (this benchmark's raw-line client) is in the profile too;
// focus on the daemon's packages to leave it out.
func BenchmarkToolCallInProcess(b *testing.B) {
	bins := build(b, false, "octosup/cmd/octosup-jail", "octosup/bench/toolapp")
	dir := b.TempDir()
	places := map[string]string{"PATH": os.Getenv("PATH")}
	for _, k := range []string{"HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"} {
		places[k] = filepath.Join(dir, k)
		if err := os.MkdirAll(places[k], 0o700); err != nil {
			b.Fatal(err)
		}
	}
	sb, err := toolSandbox("jail")
	if err != nil {
		b.Fatal(err)
	}
	manifest, err := rig.Manifest([]policy.App{toolApp(filepath.Join(bins, "toolapp"), sb)})
	if err != nil {
		b.Fatal(err)
	}
	mpath := filepath.Join(dir, "native-apps.json")
	if err := os.WriteFile(mpath, manifest, 0o600); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- octosupd.Run(ctx, octosupd.Config{
			ManifestPath: mpath,
			Getenv:       func(k string) string { return places[k] },
			Environ:      []string{"PATH=" + places["PATH"]},
			Log:          zap.NewNop(),
			Jail:         jail.Config{HelperPath: filepath.Join(bins, "octosup-jail")},
			// The socket listens before Setup runs: a dial after it
			// waits for the server, never fails.
			Setup: func(context.Context, *octosupd.Server, octosupd.Apps) error { close(served); return nil },
		})
	}()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			b.Errorf("daemon.Run: %v", err)
		}
	}()
	select {
	case <-served:
	case err := <-ran:
		ran <- err
		b.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		b.Fatal("the daemon did not serve within 10s")
	}
	client := control.Client{Path: filepath.Join(places["XDG_RUNTIME_DIR"], "octosup", "control.sock")}
	rig, err := openAppRig(ctx, client, 10*time.Second, func(context.Context) string { return "" }, func() {})
	if err != nil {
		b.Fatal(err)
	}
	defer rig.Close()
	next := 0
	for _, k := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", k), func(b *testing.B) {
			kt := &kernelTrips{k: rig.kernel, contextID: rig.contextID, base: next}
			next += b.N
			lat, el, err := withDeadline(rig.kernel, time.Minute, b.N, func() ([]time.Duration, time.Duration, error) {
				return pipelined(b.N, k, kt)
			})
			if err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
		})
	}
}
