package main

import (
	"testing"

	"octosup/control"
)

func TestJailSummary(t *testing.T) {
	all := []string{"env", "fds", "no_new_privs", "caps", "landlock", "seccomp"}
	for _, c := range []struct {
		name string
		j    *control.JailReport
		want string
	}{
		{"not running", nil, "-"},
		{"everything", &control.JailReport{LandlockABI: 7, Layers: all, Missing: []string{}}, "landlock 7, seccomp"},
		{"old kernel", &control.JailReport{LandlockABI: 5, Layers: all, Missing: []string{"landlock.scope"}}, "landlock 5, seccomp (missing landlock.scope)"},
		{"no landlock", &control.JailReport{Layers: []string{"env", "fds", "no_new_privs", "caps", "seccomp"}, Missing: []string{"landlock"}}, "seccomp (missing landlock)"},
		{"base only", &control.JailReport{Layers: []string{"env", "fds", "no_new_privs", "caps"}, Missing: []string{"landlock", "seccomp"}}, "base only (missing landlock, seccomp)"},
		{"a base layer absent is named", &control.JailReport{LandlockABI: 7, Layers: []string{"env", "fds", "landlock"}}, "env, fds, landlock 7"},
	} {
		if got := jailSummary(c.j); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
