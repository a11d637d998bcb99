package jail

import (
	"os"
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
	b.Run("prepare+input", func(b *testing.B) {
		hub, err := os.Open(os.DevNull)
		if err != nil {
			b.Fatal(err)
		}
		defer hub.Close()
		for b.Loop() {
			p, err := l.prepare(spec, nil, nil, hub)
			if err != nil {
				b.Fatal(err)
			}
			p.input(l, [4]int{0, 1, 2, 3}, -1, -1, true).Free()
			p.close()
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
