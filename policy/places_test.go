package policy

import (
	"errors"
	"slices"
	"testing"
)

// TestCheckPlaces: an external or a resource that overlaps octosup's own
// directories is refused, whichever way it overlaps (it holds them, or
// lies in them), with the field named; the home's other places are fine.
func TestCheckPlaces(t *testing.T) {
	d := Dirs{Home: "/home/ada", Config: "/home/ada/.config/octosup", State: "/home/ada/.local/state/octosup",
		Data: "/home/ada/.local/share/octosup", Runtime: "/run/user/1000/octosup"}
	for _, c := range []struct {
		path string
		bad  bool
	}{
		{"~", true},
		{"~/.local", true},
		{"~/.local/share", true},
		{"~/.local/share/octosup/jails/other", true},
		{"~/.config/octosup", true},
		{"~/.local/state/octosup/state.db", true},
		{"/run/user/1000", true},
		{"/home", true},
		{"~/Documents", false},
		{"~/.config/app", false},
		{"~/.local/share/octosupplement", false},
		{"/srv/data", false},
	} {
		for _, access := range []Access{AccessRO, AccessRW} {
			m := &Manifest{Apps: []App{{ID: "notes", Sandbox: Sandbox{Policy: PolicyJail, External: []External{{Path: c.path, Access: access}}}}}}
			err := m.CheckPlaces(d)
			var verr *ValidationError
			switch {
			case !c.bad && err != nil:
				t.Errorf("external %q %s: %v, want it allowed", c.path, access, err)
			case c.bad && (!errors.As(err, &verr) || len(verr.Problems) != 1 || verr.Problems[0].Field != "sandbox.external[0].path" || verr.Problems[0].App != "notes"):
				t.Errorf("external %q %s: %v, want one problem at sandbox.external[0].path", c.path, access, err)
			}
		}
		m := &Manifest{Apps: []App{{ID: "notes", Resources: []string{c.path}}}}
		if err := m.CheckPlaces(d); (err != nil) != c.bad {
			t.Errorf("resource %q: %v, want refused %v", c.path, err, c.bad)
		}
	}
	// The message says what and where.
	m := &Manifest{Apps: []App{{ID: "notes", Sandbox: Sandbox{Policy: PolicyJail, External: []External{{Path: "~", Access: AccessRW}}}}}}
	var verr *ValidationError
	if err := m.CheckPlaces(d); !errors.As(err, &verr) || !slices.ContainsFunc(verr.Problems, func(p Problem) bool {
		return p.String() == `app "notes": sandbox.external[0].path: "/home/ada" overlaps octosup's own configuration directory /home/ada/.config/octosup: an app granted it could change its own jail or read every app's consent (fix: grant a directory beside it instead, e.g. "~/Documents")`
	}) {
		t.Errorf("message: %v", err)
	}
}
