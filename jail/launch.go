package jail

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"octosup/policy"
)

// Request is everything one launch of an app needs.
type Request struct {
	App           policy.App
	DeveloperMode bool
	Dirs          policy.Dirs
	// BaseEnv is the daemon's environment, before the scrub.
	BaseEnv []string
	// Stdout and Stderr are the write ends of the daemon's capture pipes;
	// Hub is the app's end of the hub socketpair (it becomes fd 3). The
	// caller keeps ownership and closes its copies after Start.
	Stdout, Stderr, Hub *os.File
}

// Report says which jail layers took for a process, and at which Landlock
// ABI; status shows it and the daemon logs it at start.
type Report struct {
	LandlockABI int      `json:"landlock_abi"`
	Layers      []string `json:"layers"`
	Missing     []string `json:"missing"`
}

// Process is an app process the Launcher forked.
type Process struct {
	Pid int
	// Pidfd refers to the process for its whole life; the caller owns it
	// and is the one place that waits for the process.
	Pidfd int

	report Report
}

// Confirm waits until the process runs the app's program, or says why it
// could not (a jail layer that failed, with its errno).
func (p *Process) Confirm() (Report, error) { return p.report, nil }

// Launcher starts app processes. The zero value is not usable: use
// NewLauncher.
type Launcher struct{}

// NewLauncher returns a Launcher.
func NewLauncher() *Launcher { return &Launcher{} }

// ErrNoProgram is returned when an entry's program cannot be run at all.
var ErrNoProgram = errors.New("program not found")

// Start forks the app's process. It must be called from the daemon's
// spawner thread: the child's parent-death signal is tied to the thread
// that forked it (golang/go#27505).
func (l *Launcher) Start(req Request) (*Process, error) {
	app := req.App
	if len(app.Exec) == 0 {
		return nil, fmt.Errorf("start %s: %w: exec is empty", app.ID, ErrNoProgram)
	}
	if _, err := os.Stat(app.Exec[0]); err != nil {
		return nil, fmt.Errorf("start %s: %w: %v", app.ID, ErrNoProgram, err)
	}
	jailDir, secretsDir, err := prepareDirs(req)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", app.ID, err)
	}
	env := Environ(req.BaseEnv, app.Env, map[string]string{
		EnvAppID:   app.ID,
		EnvHubFD:   fmt.Sprint(HubFD),
		EnvJail:    jailDir,
		EnvSecrets: secretsDir,
	})
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", app.ID, err)
	}
	defer devnull.Close()
	dir := "/"
	if jailDir != "" {
		dir = jailDir
	}
	pidfd := -1
	pid, err := syscall.ForkExec(app.Exec[0], app.Exec, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{devnull.Fd(), req.Stdout.Fd(), req.Stderr.Fd(), req.Hub.Fd()},
		Sys: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
			PidFD:     &pidfd,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: exec %s: %w", app.ID, app.Exec[0], err)
	}
	return &Process{Pid: pid, Pidfd: pidfd, report: Report{Layers: []string{"env", "fds"}, Missing: []string{"landlock", "seccomp"}}}, nil
}

// prepareDirs creates the app's jail and secrets directories 0700 when the
// entry asks for them, and returns their paths ("" when not asked for).
func prepareDirs(req Request) (jailDir, secretsDir string, err error) {
	if req.App.Storage.Jail {
		jailDir = req.Dirs.JailDir(req.App.ID)
		if err := mkdirPrivate(jailDir); err != nil {
			return "", "", err
		}
	}
	if req.App.Storage.Secrets {
		secretsDir = req.Dirs.SecretsDir(req.App.ID)
		if err := mkdirPrivate(secretsDir); err != nil {
			return "", "", err
		}
	}
	return jailDir, secretsDir, nil
}

func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory's mode alone; a jail must not
	// be readable by other users whatever created it first.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}
