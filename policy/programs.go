package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// CheckPrograms looks for each app's program (exec[0]) on this machine and
// returns a warning, as a Problem, for each that is not there, not a file
// or not executable by the calling user. These are warnings, never errors:
// the manifest is valid without its programs (they may be installed after
// it is written), and the daemon reports such an app failed when it starts
// it. Like CheckPlaces it depends on the machine, which Load cannot see.
func (m *Manifest) CheckPrograms() []Problem {
	var warns []Problem
	for _, a := range m.Apps {
		if len(a.Exec) == 0 {
			continue
		}
		if msg, fix := checkProgram(a.Exec[0]); msg != "" {
			warns = append(warns, Problem{App: a.ID, Field: "exec[0]", Message: msg, Fix: fix})
		}
	}
	return warns
}

// checkProgram says what keeps path from being run, and the fix; "" when
// nothing does. It follows symlinks, as exec does.
func checkProgram(path string) (msg, fix string) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path + " does not exist: the app will fail to start until it does",
			"install the program there, or correct the path"
	case err != nil:
		return fmt.Sprintf("%s cannot be reached (%v): the app will fail to start until it can", path, unwrapPathError(err)),
			"make its directories searchable by you, or correct the path"
	case fi.IsDir():
		return path + " is a directory, not a program: the app will fail to start",
			"name the program's file, not its directory"
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%s is not a regular file (%s): the app will fail to start", path, fi.Mode().Type()),
			"name the program's file"
	}
	// access(2) answers for the real user, who runs the daemon: a file
	// another user may execute but this one may not fails here too.
	if err := unix.Access(path, unix.X_OK); err != nil {
		return path + " is not executable: the app will fail to start until it is",
			"chmod +x " + path + ", or correct the path"
	}
	return "", ""
}

// unwrapPathError drops the *fs.PathError's op and path, which the message
// already names.
func unwrapPathError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
