package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
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

func testSpec() Spec {
	return Spec{
		Version: SpecVersion, App: "a", Program: "/bin/true", Argv: []string{"/bin/true"}, Env: []string{"A=1"},
		Dir: "/", ParentPID: 1, FDs: []int{0, 1, 2, HubFD},
		Seccomp: []Syscall{{Name: "ptrace", Errno: "EPERM", Why: "debug"}},
	}
}

func TestInputRoundTrip(t *testing.T) {
	spec := testSpec()
	spec.Landlock = LandlockSpec{FS: true, Paths: []PathRule{{Path: "/usr", Access: AccessRX, Why: "system", Optional: true}},
		Net: true, ConnectTCP: []uint16{443, 65535}, BindTCP: []uint16{8080}, Scope: true, MinABI: 6, LogApp: true}
	spec.Strict = true
	spec.Seccomp = append(spec.Seccomp, Syscall{Name: "ioctl", Errno: "EPERM", Why: "TIOCSTI",
		Args: []ArgCmp{{Index: 1, Op: CmpMasked, Value: 0x5412, Mask: 0xffffffff}, {Index: 2, Op: CmpGT, Value: 1 << 63}}})
	got, prog, err := DecodeInput(EncodeInput(spec, archCheck()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, spec) || !slices.Equal(prog, archCheck()) {
		t.Errorf("round trip:\n got %+v %v\nwant %+v %v", got, prog, spec, archCheck())
	}
}

func TestDecodeInputRefuses(t *testing.T) {
	good := EncodeInput(testSpec(), archCheck())
	badSpec := testSpec()
	badSpec.FDs = []int{0, 1, 2, 3, 9}
	// The filter's length is the last length before its bytes: the
	// input without them and with a length of 0.
	noFilter := append(slices.Clone(good[:len(good)-len(archCheck())*sockFilterSz-1]), 0)
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"JSON (the old wire form)", []byte(`{"version":1}`), ErrBadSpec},
		{"another wire version", append([]byte("OSJ\x01"), good[4:]...), ErrBadSpec},
		{"trailing data", append(slices.Clone(good), 0), ErrBadSpec},
		{"truncated", good[:len(good)-1], ErrBadSpec},
		{"truncated in the spec", good[:20], ErrBadSpec},
		{"a count beyond the input", append([]byte(inputMagic), 1, 1, 'a', 1, '/', 0xff, 0xff, 0xff, 0xff, 0x0f), ErrBadSpec},
		{"no filter", noFilter, ErrBadFilter},
		{"filter without the arch check", EncodeInput(testSpec(), archCheck()[1:]), ErrBadFilter},
		{"invalid spec", EncodeInput(badSpec, archCheck()), ErrBadSpec},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := DecodeInput(c.in); !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
		})
	}
}

func FuzzDecodeInput(f *testing.F) {
	f.Add(EncodeInput(testSpec(), archCheck()))
	f.Add([]byte(inputMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, prog, err := DecodeInput(b)
		if err != nil {
			return
		}
		if err := spec.Validate(); err != nil {
			t.Errorf("accepted an invalid spec: %v", err)
		}
		if err := CheckFilter(prog); err != nil {
			t.Errorf("accepted a bad filter: %v", err)
		}
		// What decodes survives its own encoding unchanged.
		spec2, prog2, err := DecodeInput(EncodeInput(spec, prog))
		if err != nil || !reflect.DeepEqual(spec2, spec) || !slices.Equal(prog2, prog) {
			t.Errorf("re-encoded: %+v %v %v, was %+v %v", spec2, prog2, err, spec, prog)
		}
	})
}

// TestStatusLines: the helper's hand-written status lines read back, with
// encoding/json, as what encoding/json's own encoding of the same message
// reads back as.
func TestStatusLines(t *testing.T) {
	for _, m := range []statusMsg{
		{Report: &Report{LandlockABI: 7, Layers: []string{"env", "fds"}, Missing: []string{}}},
		{Report: &Report{Layers: []string{}, Missing: []string{"landlock"}}},
		{Failure: &LayerError{Layer: "landlock", Message: "open /a\"b\\c\n<&>\x00\x7f é", Errno: "ENOENT", Code: 2}},
		{Failure: &LayerError{Layer: "exec", Message: "bad \xff utf-8 \xe2\x82"}},
	} {
		checkStatus(t, m)
	}
}

func checkStatus(t *testing.T, m statusMsg) {
	t.Helper()
	ours := appendStatus(nil, m)
	theirs, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	gotRep, gotErr := ParseStatus(ours)
	wantRep, wantErr := ParseStatus(append(theirs, '\n'))
	if !reflect.DeepEqual(gotRep, wantRep) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Errorf("%s reads as %+v, %v; encoding/json's %s as %+v, %v", ours, gotRep, gotErr, theirs, wantRep, wantErr)
	}
}

func FuzzStatusLine(f *testing.F) {
	f.Add("landlock", "open /x", "ENOENT", 2, false)
	f.Add("env", "\x00\"\\", "", 0, true)
	f.Fuzz(func(t *testing.T, a, b, c string, n int, report bool) {
		if report {
			checkStatus(t, statusMsg{Report: &Report{LandlockABI: n, Layers: []string{a, b}, Missing: []string{c}}})
			return
		}
		checkStatus(t, statusMsg{Failure: &LayerError{Layer: a, Message: b, Errno: c, Code: n}})
	})
}
