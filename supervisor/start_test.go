package supervisor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"octosup/jail"
	"octosup/policy"
)

// siginfo builds the SIGCHLD siginfo_t the kernel fills in, by the
// layout of <asm-generic/siginfo.h> on a 64-bit machine: si_signo,
// si_errno, si_code, padding, then si_pid at 16, si_uid at 20 and
// si_status at 24.
func siginfo(t *testing.T, code, status int32) *unix.Siginfo {
	t.Helper()
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the hand-built siginfo has the 64-bit layout")
	}
	var info unix.Siginfo
	raw := (*[unsafe.Sizeof(unix.Siginfo{})]byte)(unsafe.Pointer(&info))
	binary.NativeEndian.PutUint32(raw[0:], uint32(unix.SIGCHLD))
	binary.NativeEndian.PutUint32(raw[8:], uint32(code))
	binary.NativeEndian.PutUint32(raw[16:], 4242) // si_pid
	binary.NativeEndian.PutUint32(raw[20:], 1000) // si_uid
	binary.NativeEndian.PutUint32(raw[24:], uint32(status))
	return &info
}

func TestExitOf(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name         string
		code, status int32
		want         Exit
		clean        bool
		str          string
	}{
		{"exit 0", cldExited, 0, Exit{Kind: ExitStatus, Code: 0, At: at}, true, "exit 0"},
		{"exit 3", cldExited, 3, Exit{Kind: ExitStatus, Code: 3, At: at}, false, "exit 3"},
		{"killed", cldKilled, 9, Exit{Kind: ExitSignal, Code: -1, Signal: "SIGKILL", SignalNumber: 9, At: at}, false, "signal SIGKILL"},
		{"dumped", cldDumped, 11, Exit{Kind: ExitSignal, Code: -1, Signal: "SIGSEGV", SignalNumber: 11, CoreDumped: true, At: at}, false, "signal SIGSEGV (core dumped)"},
		{"SIGRTMIN", cldKilled, 32, Exit{Kind: ExitSignal, Code: -1, Signal: "SIGRTMIN", SignalNumber: 32, At: at}, false, "signal SIGRTMIN"},
		{"real-time signal", cldKilled, 36, Exit{Kind: ExitSignal, Code: -1, Signal: "SIGRTMIN+4", SignalNumber: 36, At: at}, false, "signal SIGRTMIN+4"},
		{"SIGRTMAX", cldKilled, 64, Exit{Kind: ExitSignal, Code: -1, Signal: "SIGRTMIN+32", SignalNumber: 64, At: at}, false, "signal SIGRTMIN+32"},
		{"unnamed signal", cldKilled, 70, Exit{Kind: ExitSignal, Code: -1, Signal: "signal 70", SignalNumber: 70, At: at}, false, "signal signal 70"},
		{"not an exit", 5 /* CLD_STOPPED */, 19, Exit{Kind: ExitUnknown, Code: -1, At: at}, false, "exit status unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exitOf(siginfo(t, tc.code, tc.status), at)
			if got != tc.want {
				t.Fatalf("exitOf = %+v, want %+v", got, tc.want)
			}
			if got.Clean() != tc.clean || got.String() != tc.str {
				t.Errorf("Clean() = %v, String() = %q; want %v, %q", got.Clean(), got.String(), tc.clean, tc.str)
			}
		})
	}
}

// TestReapRealtimeSignal kills a real process with a real-time signal,
// which unix.SignalName cannot name: it must not read as a clean exit.
func TestReapRealtimeSignal(t *testing.T) {
	// Not a Go program: Go's runtime handles SIGRTMIN+3 once it has
	// started (and drops it), so a signal that came after its start left
	// the test waiting for ever. sleep(1) leaves it at its default action,
	// which ends the process.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep:", err)
	}
	pidfd := -1
	_, err = syscall.ForkExec(sleep, []string{sleep, "600"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{PidFD: &pidfd},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	if err := unix.PidfdSendSignal(pidfd, unix.Signal(35), nil, 0); err != nil {
		t.Fatal(err)
	}
	exit, err := reap(f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if exit.Kind != ExitSignal || exit.Signal != "SIGRTMIN+3" || exit.SignalNumber != 35 || exit.Code != -1 || exit.Clean() {
		t.Fatalf("reaped %+v, want signal SIGRTMIN+3", exit)
	}
}

// withheld stands in for a jail helper that never reports: the process
// is real and runs, but its report comes only once the process is dead,
// as a helper's status pipe reaches EOF only when the helper is gone.
type withheld struct {
	real  confirmer
	dead  int // a duplicate of the process's pidfd
	calls *atomic.Int32
}

func (w withheld) Confirm() (jail.Report, error) {
	w.calls.Add(1)
	fds := []unix.PollFd{{Fd: int32(w.dead), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	unix.Close(w.dead)
	_, _ = w.real.Confirm() // consumes the real status pipe
	return jail.Report{}, fmt.Errorf("jail: %w", jail.ErrHelperDied)
}

func withholdReports(calls *atomic.Int32) func(launchFunc) launchFunc {
	return func(launch launchFunc) launchFunc {
		return func(req jail.Request) (spawned, error) {
			sp, err := launch(req)
			if err != nil {
				return sp, err
			}
			dup, derr := unix.FcntlInt(uintptr(sp.pidfd), unix.F_DUPFD_CLOEXEC, 0)
			if derr != nil {
				panic(derr)
			}
			sp.confirm = withheld{real: sp.confirm, dead: dup, calls: calls}
			return sp, nil
		}
	}
}

// TestCancelStart: a process whose jail never reports keeps its app in
// starting, pid shown, until the start timeout, a Stop, the app's removal
// or shutdown ends the start; each kills the process and reaps it.
func TestCancelStart(t *testing.T) {
	exe := testExe(t)
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		cancel    func(t *testing.T, sup *Supervisor, stopRun context.CancelFunc)
		wantState State
		wantErr   error
		reason    string
	}{
		{"timeout", 300 * time.Millisecond, nil, Failed, ErrStartTimeout, "jail helper did not report within 300ms"},
		{"stop", 10 * time.Minute, func(t *testing.T, sup *Supervisor, _ context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			st, err := sup.Stop(ctx, "mute")
			if err != nil || st.State != Stopped || st.LastExit == nil || st.LastExit.Signal != "SIGKILL" {
				t.Errorf("stop while starting: %+v, %v", st, err)
			}
		}, Stopped, ErrStartFailed, "stopped while starting"},
		{"remove", 10 * time.Minute, func(t *testing.T, sup *Supervisor, _ context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if _, err := sup.Apply(ctx, &policy.Manifest{Version: 1}, ApplyOptions{}); err != nil {
				t.Errorf("remove while starting: %v", err)
			}
		}, "", ErrUnknownApp, ""},
		{"shutdown", 10 * time.Minute, func(t *testing.T, sup *Supervisor, stopRun context.CancelFunc) {
			stopRun()
		}, "", ErrShutdown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			cfg := Config{
				Launcher: jail.NewLauncher(jail.Config{}), Log: zap.NewNop(), Dirs: policy.Dirs{Data: t.TempDir()},
				BaseEnv: os.Environ(), StartTimeout: tc.timeout,
			}
			events := withEvents(&cfg)
			sup, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			started(t, sup, events)
			sup.launch = withholdReports(&calls)(sup.launch)
			ctx, stopRun := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- sup.Run(ctx) }()
			defer func() {
				stopRun()
				select {
				case <-ran:
				case <-time.After(waitFor):
					t.Errorf("Run did not return within %s of its context's end", waitFor)
				}
			}()
			sub := sup.Subscribe(1024, KindState)
			defer sub.Close()
			apply(t, sup, testApp(exe, "mute", "sleep", false))

			type result struct {
				st  AppStatus
				err error
			}
			started := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				st, err := sup.Start(ctx, "mute")
				started <- result{st, err}
			}()
			starting := waitState(t, sub, "mute", func(st AppStatus) bool { return st.State == Starting && st.Pid > 0 })
			if tc.cancel != nil {
				tc.cancel(t, sup, stopRun)
			}
			res := <-started
			if !errors.Is(res.err, tc.wantErr) || !errors.Is(res.err, ErrStartFailed) {
				t.Errorf("Start: %v; want %v and %v", res.err, tc.wantErr, ErrStartFailed)
			}
			if tc.wantState != "" {
				if res.st.State != tc.wantState || !strings.Contains(res.st.Reason, tc.reason) ||
					res.st.LastExit == nil || res.st.LastExit.Signal != "SIGKILL" || res.st.Pid != 0 {
					t.Errorf("after the start: %+v, last exit %+v; want %s with reason %q", res.st, res.st.LastExit, tc.wantState, tc.reason)
				}
			}
			// Killed and reaped, not left running or a zombie: the test
			// process forked it (on the spawner thread), and waitid finds
			// no such child any more.
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, starting.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); !errors.Is(err, unix.ECHILD) {
				t.Errorf("waitid(%d) = %v, want ECHILD (reaped)", starting.Pid, err)
			}
			if calls.Load() != 1 {
				t.Errorf("Confirm called %d times, want 1", calls.Load())
			}
			if l := leavesOf(t, sup, "mute"); len(l) > 0 {
				t.Errorf("the cancelled start left its cgroup leaves %q", l)
			}
		})
	}
}

// countingConfirm answers at once and counts its calls.
type countingConfirm struct{ calls *atomic.Int32 }

func (c countingConfirm) Confirm() (jail.Report, error) {
	c.calls.Add(1)
	return jail.Report{Layers: []string{}, Missing: []string{}}, nil
}

// TestStartFailureReaps: a launch the supervisor cannot use still leaves
// no zombie, no open pidfd and no unread jail status behind.
func TestStartFailureReaps(t *testing.T) {
	exe := testExe(t)
	for _, tc := range []struct {
		name   string
		launch func(real launchFunc, req jail.Request, calls *atomic.Int32) (spawned, error)
		reason string
	}{
		{"no pidfd", func(real launchFunc, req jail.Request, calls *atomic.Int32) (spawned, error) {
			sp, err := real(req)
			if err != nil {
				return sp, err
			}
			unix.Close(sp.pidfd)
			sp.pidfd = -1
			sp.confirm = countingConfirm{calls}
			return sp, nil
		}, "no pidfd"},
		{"not its own group", func(_ launchFunc, req jail.Request, calls *atomic.Int32) (spawned, error) {
			// A launcher that forgot Setpgid: the process is in the
			// test's own group, which must never be signalled.
			pidfd := -1
			pid, err := syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
				Env:   append(os.Environ(), modeEnv+"=sleep"),
				Files: []uintptr{0, req.Stdout.Fd(), req.Stderr.Fd(), req.Hub.Fd()},
				Sys:   &syscall.SysProcAttr{PidFD: &pidfd},
			})
			if err != nil {
				return spawned{pid: -1, pidfd: -1}, err
			}
			return spawned{pid: pid, pidfd: pidfd, confirm: countingConfirm{calls}}, nil
		}, "not in its own process group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			var pid atomic.Int64
			sup := startSupLaunch(t, nil, func(real launchFunc) launchFunc {
				return func(req jail.Request) (spawned, error) {
					sp, err := tc.launch(real, req, &calls)
					pid.Store(int64(sp.pid))
					return sp, err
				}
			})
			apply(t, sup, testApp(exe, "bad", "sleep", false))
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			st, err := sup.Start(ctx, "bad")
			if !errors.Is(err, ErrStartFailed) || st.State != Failed || !strings.Contains(st.Reason, tc.reason) {
				t.Fatalf("start: %+v, %v; want failed with %q", st, err, tc.reason)
			}
			p := int(pid.Load())
			if p <= 0 {
				t.Fatal("the launch started no process")
			}
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, p, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); !errors.Is(err, unix.ECHILD) {
				t.Errorf("waitid(%d) = %v, want ECHILD: the failed start left its process unreaped", p, err)
			}
			if calls.Load() != 1 {
				t.Errorf("Confirm called %d times, want 1 (the jail status must be consumed)", calls.Load())
			}
			if l := leavesOf(t, sup, "bad"); len(l) > 0 {
				t.Errorf("the failed start left its cgroup leaves %q", l)
			}
		})
	}
}

// closeLinks closes each hub it is handed.
type closeLinks struct{}

func (closeLinks) Attach(_ policy.App, hub *os.File) { hub.Close() }
func (closeLinks) Detach(string)                     {}

// TestSlowLinkHandlerWarns: a LinkHandler that breaks its promptness
// contract is named in the log. The supervisor's clock moves 2 s at each
// reading, so every call looks slow and none has to take a second.
func TestSlowLinkHandlerWarns(t *testing.T) {
	exe := testExe(t)
	core, logs := observer.New(zap.WarnLevel)
	var mu sync.Mutex
	now := time.Now()
	sup := startSupLaunch(t, func(c *testConfig) {
		c.Log = zap.New(core)
		c.Links = closeLinks{}
		c.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(2 * time.Second)
			return now
		}
	}, nil)
	apply(t, sup, testApp(exe, "lazy", "sleep", true))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sup.Stop(ctx, "lazy"); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, e := range logs.FilterMessageSnippet("link handler is slow").All() {
		calls = append(calls, e.ContextMap()["call"].(string))
	}
	if strings.Join(calls, ",") != "Attach,Detach" {
		t.Errorf("slow hook warnings for %q, want Attach,Detach", calls)
	}
}
