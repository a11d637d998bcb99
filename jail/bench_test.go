package jail

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// BenchmarkSpawn measures spawn-to-exit of /bin/true: forked directly
// with the same process attributes, and through the jail (helper
// re-exec, Landlock, seccomp) with processes false and true. The ratio is
// the jail's cost; docs/jail.md has the figures and the faster paths.
// Run without -race: the helper is this test binary.
func BenchmarkSpawn(b *testing.B) {
	h := newHarness(b)
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	wait := func(pidfd int) {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil); err != nil {
			b.Fatal(err)
		}
		unix.Close(pidfd)
	}
	plain := func(b *testing.B, argv ...string) {
		for b.Loop() {
			var pid, pidfd int
			var err error
			h.sp.do(func() {
				pidfd = -1
				pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
					Dir:   "/",
					Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd(), devnull.Fd()},
					Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
				})
			})
			if err != nil || pid <= 0 {
				b.Fatal(err)
			}
			wait(pidfd)
		}
	}
	b.Run("plain", func(b *testing.B) { plain(b, "/bin/true") })
	// The helper's floor: this binary started and ended without a jail
	// (Go runtime, dynamic linking, package inits).
	b.Run("reexec-floor", func(b *testing.B) { plain(b, h.probe, probeArg, "getpid") })
	for _, c := range []struct {
		name              string
		processes, direct bool
	}{
		{"jailed/processes=false", false, false},
		{"jailed/processes=true", true, false},
		{"jailed/processes=true/direct", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := NewLauncher(Config{HelperPath: h.probe, DirectSpawn: c.direct})
			p := c.processes
			app := policy.App{
				ID:      "bench",
				Exec:    []string{"/bin/true"},
				Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &p},
				Storage: policy.Storage{Jail: true},
			}
			for b.Loop() {
				var proc *Process
				var err error
				h.sp.do(func() {
					proc, err = l.Start(Request{App: app, Dirs: h.dirs, Stdout: devnull, Stderr: devnull, Hub: devnull})
				})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := proc.Confirm(); err != nil {
					b.Fatal(err)
				}
				wait(proc.Pidfd)
			}
		})
	}
}
