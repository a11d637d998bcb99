package policy

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CheckPlaces finds what a manifest grants that overlaps octosup's own
// directories under d: an external (ro or rw) or a resource that is, holds
// or lies in the configuration, state, data (jails, secrets) or runtime
// directory. Through one, an app would read every app's consent and
// rules, rewrite the manifest or another app's jail, replace its own jail
// with a symlink, or reach the control socket's directory. Load cannot
// see this: it needs the user's directories, which "~" and the XDG
// variables decide. It returns nil or a *ValidationError.
func (m *Manifest) CheckPlaces(d Dirs) error {
	own := []struct{ what, dir string }{
		{"configuration", d.Config}, {"state (consent, rules, sessions)", d.State},
		{"data (jails, secrets)", d.Data}, {"runtime (the control socket)", d.Runtime},
	}
	var probs []Problem
	check := func(app App, field, p string) {
		if p = d.Expand(p); !filepath.IsAbs(p) {
			return
		}
		p = filepath.Clean(p)
		for _, o := range own {
			if o.dir == "" || !(within(p, o.dir) || within(o.dir, p)) {
				continue
			}
			probs = append(probs, Problem{App: app.ID, Field: field,
				Message: fmt.Sprintf("%q overlaps octosup's own %s directory %s: an app granted it could change its own jail or read every app's consent", p, o.what, o.dir),
				Fix:     "grant a directory beside it instead, e.g. \"~/Documents\""})
			return
		}
	}
	for _, a := range m.Apps {
		for k, r := range a.Resources {
			check(a, fmt.Sprintf("resources[%d]", k), r)
		}
		if a.Sandbox.Policy == PolicyBroad {
			continue // a broad app's filesystem is not narrowed at all
		}
		for k, e := range a.Sandbox.External {
			check(a, fmt.Sprintf("sandbox.external[%d].path", k), e.Path)
		}
	}
	if len(probs) == 0 {
		return nil
	}
	return &ValidationError{Problems: probs}
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
