package helper

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// archCheck is the front every filter must have: what libseccomp emits
// with a kill-process bad-arch action (jail/seccomp_test.go checks that
// it does), then one allow.
func archCheck() []unix.SockFilter {
	return []unix.SockFilter{
		{Code: bpfLdWAbs, K: archOffset},
		{Code: bpfJeqK, Jt: 1, Jf: 0, K: nativeAuditArch},
		{Code: bpfRetK, K: retKillProc},
		{Code: bpfRetK, K: unix.SECCOMP_RET_ALLOW},
	}
}

func TestCheckFilter(t *testing.T) {
	mut := func(f func(p []unix.SockFilter) []unix.SockFilter) []unix.SockFilter { return f(archCheck()) }
	cases := []struct {
		name string
		prog []unix.SockFilter
		err  string // "" for a filter the helper loads
	}{
		{"arch check then allow", archCheck(), ""},
		{"empty", nil, "3 to 4096"},
		{"too long", make([]unix.SockFilter, MaxFilter+1), "3 to 4096"},
		{"no arch load", mut(func(p []unix.SockFilter) []unix.SockFilter { p[0].K = 0; return p }), "load of seccomp_data.arch"},
		{"another arch", mut(func(p []unix.SockFilter) []unix.SockFilter { p[1].K = 0x40000003; return p }), "compare with AUDIT_ARCH"},
		{"jset instead of jeq", mut(func(p []unix.SockFilter) []unix.SockFilter {
			p[1].Code = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
			return p
		}), "compare with AUDIT_ARCH"},
		{"wrong arch allowed", mut(func(p []unix.SockFilter) []unix.SockFilter { p[2].K = unix.SECCOMP_RET_ALLOW; return p }), "do not kill"},
		{"wrong arch kills the thread only", mut(func(p []unix.SockFilter) []unix.SockFilter { p[2].K = unix.SECCOMP_RET_KILL_THREAD; return p }), "do not kill"},
		{"mismatch jumps off the end", mut(func(p []unix.SockFilter) []unix.SockFilter { p[1].Jf = 200; return p }), "do not kill"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckFilter(c.prog)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want ErrBadFilter with %q", err, c.err)
			}
		})
	}
}
