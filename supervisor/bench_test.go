package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/policy"
)

// BenchmarkCrashDetect measures SIGKILL of an app → its "stopped" state
// event: the kernel's teardown, the netpoller wake-up, the group kill,
// the reap and the event. Compare with BenchmarkKillWaitpid.
func BenchmarkCrashDetect(b *testing.B) {
	exe := testExe(b)
	sup := startSup(b, func(c *testConfig) { c.Log = zap.NewNop() })
	apply(b, sup, testApp(exe, "victim", "sleep", false))
	sub := sup.Subscribe(4096)
	defer sub.Close()
	ctx := context.Background()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		st, err := sup.Start(ctx, "victim")
		if err != nil {
			b.Fatal(err)
		}
		waitLog(b, sub, "victim", "ready")
		b.StartTimer()
		if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
			b.Fatal(err)
		}
		waitState(b, sub, "victim", inState(Stopped))
		b.StopTimer()
	}
}

// BenchmarkKillWaitpid is the baseline: SIGKILL of a plain child and a
// blocking wait for it.
func BenchmarkKillWaitpid(b *testing.B) {
	exe := testExe(b)
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), modeEnv+"=sleep")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil { // "ready\n": the child runs
			b.Fatal(err)
		}
		b.StartTimer()
		if err := cmd.Process.Kill(); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait()
		b.StopTimer()
	}
}

// BenchmarkStatus100 is Status("") over 100 apps (stopped ones: Status
// does the same work whatever the state).
func BenchmarkStatus100(b *testing.B) {
	exe := testExe(b)
	sup := startSup(b, func(c *testConfig) { c.Log = zap.NewNop() })
	apps := make([]policy.App, 100)
	for i := range apps {
		apps[i] = testApp(exe, fmt.Sprintf("app-%d", i), "sleep", false)
	}
	apply(b, sup, apps...)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if st, err := sup.Status(""); err != nil || len(st) != 100 {
			b.Fatal(len(st), err)
		}
	}
}
