package jail

import (
	"testing"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

// BenchmarkPrepare times what Start does before it forks, piece by piece
// (docs/jail.md, "What a start costs"):
//
//	go test -run '^$' -bench BenchmarkPrepare -benchmem ./jail/
func BenchmarkPrepare(b *testing.B) {
	h := newHarness(b)
	processes := false
	app := policy.App{
		ID:      "bench",
		Exec:    []string{"/bin/true"},
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &processes},
		Storage: policy.Storage{Jail: true},
	}
	l := NewLauncher(Config{HelperPath: h.helper})
	req := Request{App: app, Dirs: h.dirs}
	b.Run("spec", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Spec(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	spec, _ := l.Spec(req)
	_ = prepareDirs(req)
	b.Run("filter", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.filters.get(spec.Seccomp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ruleset", func(b *testing.B) {
		for b.Loop() {
			fd, _, err := helper.BuildRuleset(spec.Landlock, helper.LandlockABI())
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	b.Run("encode", func(b *testing.B) {
		prog, _ := l.filters.get(spec.Seccomp)
		for b.Loop() {
			_ = helper.EncodeInput(spec, prog)
		}
	})
	b.Run("prepareDirs", func(b *testing.B) {
		for b.Loop() {
			if err := prepareDirs(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
