package jail

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

func TestResolveSockets(t *testing.T) {
	cases := []struct {
		name  string
		socks []string
		env   []string
		want  []string // paths; nil with err
		err   string
	}{
		{"defaults", []string{"wayland", "pulseaudio"}, []string{"XDG_RUNTIME_DIR=/run/user/7"},
			[]string{"/run/user/7/wayland-0", "/run/user/7/pulse/native"}, ""},
		{"named", []string{"wayland", "pulseaudio"},
			[]string{"XDG_RUNTIME_DIR=/run/user/7", "WAYLAND_DISPLAY=wayland-1", "PULSE_SERVER={abc}unix:/run/pa/native"},
			[]string{"/run/user/7/wayland-1", "/run/pa/native"}, ""},
		{"absolute display without a runtime dir", []string{"wayland"}, []string{"WAYLAND_DISPLAY=/tmp/w/./wayland-0"},
			[]string{"/tmp/w/wayland-0"}, ""},
		{"relative display without a runtime dir", []string{"wayland"}, []string{"WAYLAND_DISPLAY=wayland-0"},
			nil, "no absolute XDG_RUNTIME_DIR"},
		{"a tcp sound server", []string{"pulseaudio"}, []string{"XDG_RUNTIME_DIR=/r", "PULSE_SERVER=tcp:host:4713"},
			nil, "names no single unix socket"},
		{"a list of sound servers", []string{"pulseaudio"}, []string{"XDG_RUNTIME_DIR=/r", "PULSE_SERVER=unix:/a unix:/b"},
			nil, "names no single unix socket"},
		{"too long", []string{"wayland"}, []string{"WAYLAND_DISPLAY=/" + strings.Repeat("x", 120)}, nil, "longer than"},
		{"unknown", []string{"x11"}, []string{"XDG_RUNTIME_DIR=/r"}, nil, "not a socket octosup grants"},
		{"pipewire's own socket", []string{"pipewire"}, []string{"XDG_RUNTIME_DIR=/r"}, nil, "not a socket octosup grants"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolveSockets(c.socks, c.env)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, g := range got {
				paths = append(paths, g.Path)
				// The sound server only through the filter.
				if want := map[string]string{"wayland": GrantGuard, "pulseaudio": GrantPulseFilter}[g.Name]; g.Via != want || g.From == "" {
					t.Errorf("grant %+v", g)
				}
			}
			if !slices.Equal(paths, c.want) {
				t.Fatalf("paths %q, want %q", paths, c.want)
			}
		})
	}
}

// TestCompileDesktop: what sockets and devices add to a spec, and when
// the guard decides connect.
func TestCompileDesktop(t *testing.T) {
	cases := []struct {
		name      string
		mut       func(a *policy.App)
		abi       int
		guard     bool
		runtime   bool
		env       []string
		unixSocks bool
	}{
		{"nothing", func(*policy.App) {}, 7, false, false, nil, false},
		{"wayland", func(a *policy.App) { a.Sandbox.Sockets = []string{"wayland"} }, 7, true, true,
			[]string{"WAYLAND_DISPLAY=/run/user/7/wayland-0", "XDG_RUNTIME_DIR=/run/user/1000/octosup/apps/paint"}, false},
		{"wayland at abi 9", func(a *policy.App) { a.Sandbox.Sockets = []string{"wayland"} }, 9, true, true, nil, false},
		{"sound", func(a *policy.App) { a.Sandbox.Sockets = []string{"pulseaudio"} }, 7, true, true,
			[]string{"PULSE_SERVER=unix:/run/user/7/pulse/native"}, false},
		{"full below 9", func(a *policy.App) { a.Sandbox.Network = policy.NetworkFull }, 7, true, false, nil, false},
		{"full at 9: Landlock's rule", func(a *policy.App) { a.Sandbox.Network = policy.NetworkFull }, 9, false, false, nil, true},
		{"gpu", func(a *policy.App) { a.Sandbox.Devices = []string{"dri"} }, 7, false, true, nil, false},
		{"narrowed drops them", func(a *policy.App) { a.Sandbox.Sockets = []string{"wayland"} }, -1, false, false, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := policy.App{ID: "paint", Exec: []string{"/usr/bin/paint"},
				Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone}}
			c.mut(&a)
			opt := Options{Dirs: testDirs, BaseEnv: []string{"XDG_RUNTIME_DIR=/run/user/7"}, ParentPID: 1, LandlockABI: c.abi,
				RenderNodes: []RenderNode{{Path: "/dev/dri/renderD128", SysDir: "/sys/devices/pci0000:00/0000:00:02.0"}}}
			if c.abi < 0 {
				opt.LandlockABI, opt.Narrowed = 7, true
			}
			s, err := Compile(a, opt)
			if err != nil {
				t.Fatal(err)
			}
			notify := slices.ContainsFunc(s.Seccomp, func(r Syscall) bool { return r.Notify && r.Name == "connect" })
			if notify != c.guard {
				t.Errorf("connect notified %v, want %v", notify, c.guard)
			}
			hasRuntime := slices.ContainsFunc(s.Landlock.Paths, func(p PathRule) bool { return p.Why == "runtime" })
			if hasRuntime != c.runtime {
				t.Errorf("runtime dir rule %v, want %v", hasRuntime, c.runtime)
			}
			for _, kv := range c.env {
				if !slices.Contains(s.Env, kv) {
					t.Errorf("env lacks %s: %q", kv, s.Env)
				}
			}
			if s.Landlock.UnixSockets != c.unixSocks {
				t.Errorf("landlock unix sockets %v, want %v", s.Landlock.UnixSockets, c.unixSocks)
			}
			if c.guard && s.Landlock.MinABI > 6 {
				t.Errorf("min ABI %d: the guard covers unix sockets below 9", s.Landlock.MinABI)
			}
		})
	}
}

func TestGPURules(t *testing.T) {
	rules := gpuRules([]RenderNode{{Path: "/dev/dri/renderD128", SysDir: "/sys/devices/pci0000:00/0000:00:02.0"}})
	want := map[string]Access{
		"/dev/dri":                             AccessList,
		"/dev/dri/renderD128":                  AccessRead | AccessWrite | AccessDevIoctl,
		"/sys/devices/pci0000:00/0000:00:02.0": AccessRO,
		"/sys/dev/char":                        AccessRO,
	}
	for p, a := range want {
		i := slices.IndexFunc(rules, func(r PathRule) bool { return r.Path == p })
		if i < 0 || rules[i].Access != a {
			t.Errorf("%s: rule %v, want %v", p, rules, a)
		}
	}
	if slices.ContainsFunc(rules, func(r PathRule) bool { return strings.Contains(r.Path, "card") || r.Path == "/dev" }) {
		t.Errorf("a primary node or all of /dev granted: %v", rules)
	}
}

func TestDecodeSockaddr(t *testing.T) {
	unixAddr := func(name string, n int) []byte {
		b := make([]byte, n)
		binary.NativeEndian.PutUint16(b, unix.AF_UNIX)
		copy(b[2:], name)
		return b
	}
	inet := func(fam uint16, port uint16, n int) []byte {
		b := make([]byte, n)
		binary.NativeEndian.PutUint16(b, fam)
		binary.BigEndian.PutUint16(b[2:], port)
		return b
	}
	cases := []struct {
		name string
		in   []byte
		want sockAddr
		err  error
	}{
		{"pathname, NUL-terminated", unixAddr("/run/w\x00junk", 110), sockAddr{family: unix.AF_UNIX, path: "/run/w"}, nil},
		{"pathname to the end", unixAddr("/run/w", 8), sockAddr{family: unix.AF_UNIX, path: "/run/w"}, nil},
		{"abstract keeps every byte", unixAddr("\x00bus\x00x", 8), sockAddr{family: unix.AF_UNIX, path: "bus\x00x", abstract: true}, nil},
		{"unnamed", unixAddr("", 2), sockAddr{family: unix.AF_UNIX}, nil},
		{"inet", inet(unix.AF_INET, 443, 16), sockAddr{family: unix.AF_INET, port: 443}, nil},
		{"inet6 without scope", inet(unix.AF_INET6, 80, 24), sockAddr{family: unix.AF_INET6, port: 80}, nil},
		{"short inet", inet(unix.AF_INET, 443, 8), sockAddr{}, unix.EINVAL},
		{"one byte", []byte{1}, sockAddr{}, unix.EINVAL},
		{"too long", make([]byte, 200), sockAddr{}, unix.EINVAL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeSockaddr(c.in)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err %v, want %v", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// FuzzDecodeSockaddr: any bytes decode without panicking, and a unix
// pathname never holds a NUL nor exceeds sun_path.
func FuzzDecodeSockaddr(f *testing.F) {
	f.Add([]byte{1, 0, '/', 'x', 0})
	f.Add([]byte{1, 0, 0, 'a'})
	f.Add([]byte{2, 0, 1, 187, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeSockaddr(b)
		if err != nil {
			return
		}
		if a.family == unix.AF_UNIX && !a.abstract && strings.ContainsRune(a.path, 0) {
			t.Fatalf("pathname %q holds a NUL", a.path)
		}
		if len(a.path) > 108 {
			t.Fatalf("name of %d bytes", len(a.path))
		}
	})
}

func TestDesktopGrants(t *testing.T) {
	sock := SocketGrant{Name: "wayland", Path: "/run/user/1000/wayland-0", From: "WAYLAND_DISPLAY", Via: GrantGuard}
	for _, c := range []struct {
		name  string
		spec  Spec
		grant []helper.Grant
	}{
		{"none", Spec{}, nil},
		{"wayland", Spec{Sockets: []SocketGrant{sock}}, []helper.Grant{{Name: "wayland", Path: sock.Path, Via: GrantGuard}}},
		{"dri with a node", Spec{Landlock: LandlockSpec{Paths: gpuRules([]RenderNode{{Path: "/dev/dri/renderD128"}})}},
			[]helper.Grant{{Name: "dri", Path: "/dev/dri/renderD128", Via: helper.GrantNode}}},
		{"dri without a node", Spec{Landlock: LandlockSpec{Paths: gpuRules(nil)}},
			[]helper.Grant{{Name: "dri", Via: helper.GrantNoNode}}},
	} {
		if got := desktopGrants(c.spec); !slices.Equal(got, c.grant) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.grant)
		}
	}
}
