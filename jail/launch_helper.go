package jail

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"octosup/jail/spawn"
)

// The helper launcher, for Config.UseHelper and wherever the in-process
// spawn (fork.go) cannot run: the daemon prepares the jail (prepare.go),
// then execs the helper with the prepared input in a memfd and a status
// pipe, and the helper runs the same setup sequence (jail/spawn) before
// its exec of the app's program. Its answer comes down the status pipe,
// which Process.Confirm reads.

// startHelper forks the helper, which runs the setup sequence on what
// was prepared, into the cgroup cgroupFD when it is positive.
func (l *Launcher) startHelper(spec Spec, stdout, stderr, hub *os.File, cgroupFD int) (*Process, error) {
	prep, err := l.prepare(spec, stdout, stderr, hub)
	if err != nil {
		return nil, err
	}
	defer prep.close()
	// The helper's descriptors: the app's 0–3, the status pipe and the
	// input on spawn.StatusFD and spawn.InputFD, then the ruleset and the
	// listener's socket when there are.
	files := []uintptr{prep.files[0].Fd(), prep.files[1].Fd(), prep.files[2].Fd(), prep.files[3].Fd(), 0, 0}
	ruleset, notify := -1, -1
	if prep.rulesetFD >= 0 {
		ruleset = len(files)
		files = append(files, uintptr(prep.rulesetFD))
	}
	if prep.notifyW >= 0 {
		notify = len(files)
		files = append(files, uintptr(prep.notifyW))
	}
	in := prep.input(l, [4]int{0, 1, 2, 3}, ruleset, notify, true)
	input, err := inputFile(in)
	in.Free()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.App, err)
	}
	defer input.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: status pipe: %w", spec.App, err)
	}
	defer statusW.Close()
	files[spawn.StatusFD], files[spawn.InputFD] = statusW.Fd(), input.Fd()
	pid, pidfd, err := l.forkHelper(files, cgroupFD)
	runtime.KeepAlive(prep.files)
	if err != nil {
		statusR.Close()
		return nil, fmt.Errorf("start %s: exec helper %s: %w", spec.App, l.cfg.HelperPath, err)
	}
	return &Process{Pid: pid, Pidfd: pidfd, app: spec.App, log: l.log, status: statusR, spec: spec, report: prep.rep,
		notifySock: prep.takeNotifyR(), guard: l.guardFor(spec)}, nil
}

// inputFile puts the helper's input in a memfd, not a pipe: the whole
// input is there before the fork, so Start never blocks on the helper
// reading it, and the helper maps it rather than reading it.
func inputFile(in *spawn.Input) (*os.File, error) {
	memfd, err := unix.MemfdCreate("octosup-jail-input", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("input memfd: %w", err)
	}
	f := os.NewFile(uintptr(memfd), "jail-input")
	if _, err := f.Write(in.Bytes()); err != nil {
		f.Close()
		return nil, fmt.Errorf("write the helper's input: %w", err)
	}
	return f, nil
}

// forkHelper forks and execs [HelperPath, HelperArg] with files as its
// descriptors, in a session of its own, killed when the forking
// thread (the spawner) dies.
func (l *Launcher) forkHelper(files []uintptr, cgroupFD int) (pid, pidfd int, err error) {
	pidfd = -1
	pid, err = syscall.ForkExec(l.cfg.HelperPath, []string{l.cfg.HelperPath, HelperArg}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   helperEnv(),
		Files: files,
		Sys: &syscall.SysProcAttr{
			// A session of its own from the fork (the sequence's
			// setsid finds it so): see jail/spawn.
			Setsid:    true,
			Pdeathsig: syscall.SIGKILL,
			PidFD:     &pidfd,
			// clone3 with CLONE_INTO_CGROUP: the helper, and so the app
			// and all it forks, start in the leaf.
			UseCgroupFD: cgroupFD > 0,
			CgroupFD:    max(cgroupFD, 0),
		},
	})
	return pid, pidfd, err
}

// readStatus reads the helper's status up to EOF: nil when the sequence
// reached its exec and the exec succeeded, else why not.
func readStatus(r io.Reader, spec Spec) error {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return fmt.Errorf("jail: read helper status: %w", err)
	}
	return parseStatus(data, spec)
}

// parseStatus reads the helper's status records (spawn.ParseStatus).
func parseStatus(data []byte, spec Spec) error {
	st, ok := spawn.ParseStatus(data)
	switch {
	case !ok && len(data) == 0:
		return fmt.Errorf("jail: %w", ErrHelperDied)
	case !ok:
		return fmt.Errorf("jail: bad helper status (%d bytes): %w", len(data), ErrHelperDied)
	case st.Step == spawn.StepOK:
		return nil
	}
	return stepFailure(spec, st)
}
