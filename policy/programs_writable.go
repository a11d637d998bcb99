package policy

import (
	"fmt"
	"path/filepath"
)

// CheckWritablePrograms returns a warning for each app whose program
// (exec[0], through its symlinks) lies in a place a jail app of the
// manifest may write (an rw external, with ~ expanded by d): that app
// could rewrite the program, and with it what the next start runs and
// is granted (its #! line, its ELF interpreter). The daemon refuses to
// start such an app; validate says so before it does. Like CheckPrograms
// it reads the machine (where the links lead).
func (m *Manifest) CheckWritablePrograms(d Dirs) []Problem {
	type place struct{ app, path string }
	var places []place
	for _, a := range m.Apps {
		if a.Sandbox.Policy != PolicyJail {
			continue
		}
		for _, e := range a.Sandbox.External {
			if e.Access != AccessRW {
				continue
			}
			p := filepath.Clean(d.Expand(e.Path))
			places = append(places, place{a.ID, p})
			if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
				places = append(places, place{a.ID, real})
			}
		}
	}
	var warns []Problem
	for _, a := range m.Apps {
		if len(a.Exec) == 0 || !filepath.IsAbs(a.Exec[0]) {
			continue
		}
		prog := filepath.Clean(a.Exec[0])
		real, err := filepath.EvalSymlinks(prog)
		if err != nil {
			real = prog
		}
		for _, pl := range places {
			if within(prog, pl.path) || within(real, pl.path) {
				warns = append(warns, Problem{App: a.ID, Field: "exec[0]",
					Message: fmt.Sprintf("%s lies in %s, which app %q may write (an rw external): it could rewrite the program and choose what the next start runs, so the daemon refuses to start %q", prog, pl.path, pl.app, a.ID),
					Fix:     "install the program outside every rw external"})
				break
			}
		}
	}
	return warns
}
