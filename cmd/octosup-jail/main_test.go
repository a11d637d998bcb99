package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps: the helper imports none of the daemon's heavy or cgo
// dependencies. Each would cost every app start its package inits (or the
// dynamic loader), and libseccomp would make the binary cgo.
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command(gobin, "list", "-deps", "octosup/cmd/octosup-jail")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"runtime/cgo", "github.com/seccomp/", "go.uber.org/", "github.com/spf13/", "octosup/policy", "octosup/daemon", "octosup/supervisor"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("octosup-jail imports %s", d)
			}
		}
	}
}
