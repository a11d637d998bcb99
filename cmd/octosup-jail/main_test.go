package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps: the helper imports none of the daemon's heavy dependencies:
// it links the setup sequence (octosup/jail/spawn) and libc. libseccomp
// would not link statically everywhere, and the rest only makes the
// binary that every helper start maps bigger.
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command(gobin, "list", "-deps", "octosup/cmd/octosup-jail")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/seccomp/", "github.com/landlock-lsm/", "go.uber.org/", "github.com/spf13/", "octosup/policy", "octosup/daemon", "octosup/supervisor"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("octosup-jail imports %s", d)
			}
		}
		if d == "octosup/jail" || d == "octosup/jail/helper" {
			t.Errorf("octosup-jail imports %s (the daemon's side of the jail)", d)
		}
	}
}
