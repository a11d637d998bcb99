package main

import (
	"slices"
	"strings"
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
		{"desktop grants", &control.JailReport{LandlockABI: 7, Layers: all, Grants: []control.Grant{
			{Name: "wayland", Path: "/run/user/1000/wayland-0", Via: "guard-connect"}, {Name: "pulseaudio", Path: "/run/user/1000/pulse/native", Via: "guard-connect"},
			{Name: "dri", Path: "/dev/dri/renderD128", Via: "landlock"}, {Name: "dri", Path: "/dev/dri/renderD129", Via: "landlock"}}},
			"landlock 7, seccomp; wayland (no security context), pulseaudio, dri (2 nodes)"},
		{"dri on a machine without a GPU", &control.JailReport{LandlockABI: 7, Layers: all, Grants: []control.Grant{{Name: "dri", Via: "no-render-node"}}},
			"landlock 7, seccomp; dri (no render node)"},
	} {
		if got := jailSummary(c.j); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestGrantLines(t *testing.T) {
	got := grantLines(&control.JailReport{Grants: []control.Grant{
		{Name: "wayland", Path: "/run/user/1000/wayland-0", Via: "guard-connect"}, {Name: "dri", Via: "no-render-node"}}})
	want := []string{
		"desktop (at the last start):",
		"  wayland    /run/user/1000/wayland-0 (the daemon made the connection: the server sees the daemon; no security context, so every protocol the compositor offers its clients, screen capture and virtual input among them where it has them)",
		"  dri        - (no render node on this machine: the app draws without the GPU)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := grantLines(&control.JailReport{}); got != nil {
		t.Errorf("no grants: %q", got)
	}
}
