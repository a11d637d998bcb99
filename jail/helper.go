package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/spawn"
)

// HelperArg is argv[1] of the jail helper. Nothing else is on argv (other
// processes can read a command line): its input comes on an inherited
// descriptor.
const HelperArg = spawn.Arg

// IsHelper reports whether args (os.Args) ask for the helper mode. Every
// binary that links this package is a helper already: a constructor of
// jail/spawn runs the setup sequence before its Go runtime starts when
// its argv says so (octosup-jail; octosupd, so that --jail-helper may name
// it; a test binary the Launcher re-executes, with Config.HelperPath
// left empty). A main or TestMain that calls IsHelper first, and then
// RunHelper, never sees it true; it stays for a binary whose C
// constructors do not run.
func IsHelper(args []string) bool { return spawn.IsHelper(args) }

// RunHelper is the helper's whole life (spawn.RunHelper): it reads its
// input, runs the setup sequence and execs the app's program. It returns
// only on failure, with the exit code, after reporting the failing step.
func RunHelper() int { return spawn.RunHelper() }

// LayerError says which jail layer failed and why: it is what status shows
// after "failed: ", e.g. "landlock: restrict: EINVAL".
type LayerError = helper.LayerError

// Report says which jail layers took for a process, and at which Landlock
// ABI; status shows it and the daemon logs it at start. Layers are env,
// fds, no_new_privs, caps, landlock, seccomp; Missing names what the
// kernel could not enforce (landlock, landlock.truncate, landlock.net,
// landlock.scope, seccomp).
type Report = helper.Report

// ErrHelperDied is wrapped when the helper ended without saying why
// (killed, or crashed before it could report).
var ErrHelperDied = helper.ErrDied

// layerErr is the LayerError for err, which may hold an errno.
func layerErr(layer, msg string, err error) *LayerError { return helper.LayerErr(layer, msg, err) }

// helperEnv is the helper's whole environment: none. The app's is in
// its input, and the helper's own Go runtime, if it has one, never starts.
func helperEnv() []string { return []string{} }

// HelperName is the helper binary's file name (cmd/octosup-jail).
const HelperName = "octosup-jail"

// ErrNoHelper is wrapped when FindHelper finds no helper binary to run.
var ErrNoHelper = errors.New("jail helper not found")

// FindHelper resolves the jail helper the daemon runs for every app:
// path when one is given (octosupd run --jail-helper), else HelperName in
// the directory of the running executable, where make install puts both.
// It checks the file is an executable regular file, so that a daemon
// without its helper says so at start instead of failing every app.
func FindHelper(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("%w: locate this executable: %v", ErrNoHelper, err)
		}
		p := filepath.Join(filepath.Dir(exe), HelperName)
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: %s not found next to %s (%v): install it (make install) or pass --jail-helper", ErrNoHelper, HelperName, filepath.Base(exe), err)
		}
		return p, nil
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoHelper, path, err)
	}
	if err := checkExecutable(p); err != nil {
		return "", fmt.Errorf("%w: --jail-helper %s: %v", ErrNoHelper, path, err)
	}
	return p, nil
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("%s is not executable: %w", p, err)
	}
	return nil
}
