package jail

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

var testDirs = policy.Dirs{
	Home:    "/home/ada",
	Config:  "/home/ada/.config/octosup",
	State:   "/home/ada/.local/state/octosup",
	Data:    "/home/ada/.local/share/octosup",
	Runtime: "/run/user/1000/octosup",
}

func notesApp() policy.App {
	no := false
	return policy.App{
		ID:        "notes",
		Exec:      []string{"/usr/lib/octos/notes", "--hub-fd", "3"},
		Resources: []string{"/usr/share/octos/notes"},
		Sandbox: policy.Sandbox{
			Policy: policy.PolicyJail, Network: policy.NetworkTCP, TCPConnect: []uint16{443, 80, 443}, Processes: &no,
			External: []policy.External{{Path: "~/Documents/Notes", Access: policy.AccessRW}, {Path: "/srv/shared", Access: policy.AccessRO}},
		},
		Storage: policy.Storage{Jail: true, Secrets: true},
		Env:     map[string]string{"LANG": "C.UTF-8", "OCTOS_SMUGGLED": "x"},
	}
}

func testOptions() Options {
	return Options{
		Dirs:         testDirs,
		BaseEnv:      []string{"HOME=/home/ada", "PATH=/usr/bin:/bin", "OCTOS_KEY=k", "NOTIFY_SOCKET=/run/n"},
		ParentPID:    4242,
		Interpreters: []string{"/lib64/ld-linux-x86-64.so.2"},
		BroadRoots:   []string{"/home", "/tmp", "/usr"},
		SystemLinks: map[string]string{
			"/etc/resolv.conf": "/run/systemd/resolve/stub-resolv.conf",
			"/etc/localtime":   "/usr/share/zoneinfo/Etc/UTC",
			"/etc/mtab":        "/proc/self/mounts",
		},
	}
}

func TestDescribeGolden(t *testing.T) {
	spec, err := Compile(notesApp(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := Describe(spec)
	path := filepath.Join("testdata", "describe_notes.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("Describe changed; run with -update if intended.\ngot:\n%s", got)
	}
}

func TestCompileRules(t *testing.T) {
	spec, err := Compile(notesApp(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	rule := func(path string) (PathRule, bool) {
		for _, r := range spec.Landlock.Paths {
			if r.Path == path {
				return r, true
			}
		}
		return PathRule{}, false
	}
	for _, c := range []struct {
		path string
		want Access // 0: no rule at all
	}{
		{"/usr", AccessRO}, // processes: false: no exec in system dirs
		{"/etc", AccessRO},
		{"/usr/lib/octos/notes", AccessRead | AccessExec},
		{"/lib64/ld-linux-x86-64.so.2", AccessRead | AccessExec},
		{"/etc/resolv.conf", AccessRead}, // its target is in /run
		{"/etc/localtime", 0},            // its target is in /usr already
		{"/usr/share/octos/notes", AccessRO},
		{"/home/ada/.local/share/octosup/jails/notes", AccessRW},
		{"/home/ada/.local/share/octosup/secrets/notes", AccessRW},
		{"/home/ada/Documents/Notes", AccessRW},
		{"/srv/shared", AccessRO},
		{"/proc/self", AccessRO},
		{"/dev/null", AccessRead | AccessWrite | AccessTruncate},
		{"/home/ada", 0},
		{"/tmp", 0},
		{"/run", 0},
	} {
		r, ok := rule(c.path)
		if c.want == 0 {
			if ok {
				t.Errorf("%s is granted %v", c.path, r.Access)
			}
			continue
		}
		if !ok || r.Access != c.want {
			t.Errorf("%s: %v (rule %v), want %v", c.path, r.Access, ok, c.want)
		}
	}
	if !slices.Equal(spec.Landlock.ConnectTCP, []uint16{80, 443}) || len(spec.Landlock.BindTCP) != 0 || !spec.Landlock.Net {
		t.Errorf("tcp: %+v", spec.Landlock)
	}
	if spec.Landlock.MinABI != 6 || !spec.Landlock.Scope {
		t.Errorf("min ABI %d, scope %v", spec.Landlock.MinABI, spec.Landlock.Scope)
	}
	if slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "OCTOS_") || strings.HasPrefix(kv, "NOTIFY_") }) {
		t.Errorf("env not scrubbed: %v", spec.Env)
	}
	if spec.Dir != testDirs.JailDir("notes") {
		t.Errorf("dir %s", spec.Dir)
	}

	broad := notesApp()
	broad.Sandbox.Policy = policy.PolicyBroad
	bs, err := Compile(broad, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Broad reads everywhere and writes beneath its roots and its own
	// /proc entry only: never /sys (its cgroup) or another's /proc entry.
	if bs.Landlock.FS || bs.Landlock.Net || !bs.Landlock.WriteOnly || !bs.Landlock.Scope {
		t.Errorf("broad landlock: %+v", bs.Landlock)
	}
	var whys []string
	for _, p := range bs.Landlock.Paths {
		whys = append(whys, p.Why+" "+p.Path)
		if p.Access&(AccessRead|AccessList|AccessExec) != 0 {
			t.Errorf("broad rule %s grants %v: reading is not narrowed, so no rule should carry it", p.Path, p.Access)
		}
	}
	if want := []string{"broad /home", "broad /tmp", "broad /usr", "proc /proc/self"}; !slices.Equal(whys, want) {
		t.Errorf("broad rules %q, want %q", whys, want)
	}
	if !slices.ContainsFunc(bs.Seccomp, func(s Syscall) bool { return s.Name == "ptrace" }) {
		t.Error("broad lost the syscall filter")
	}
	if slices.ContainsFunc(bs.Seccomp, func(s Syscall) bool { return s.Name == "socket" }) {
		t.Error("broad narrowed the network")
	}
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct {
		mut  func(a *policy.App, o *Options)
		want string
	}{
		{func(a *policy.App, o *Options) { a.Exec = nil }, "exec[0]"},
		{func(a *policy.App, o *Options) { a.Exec = []string{"notes"} }, "exec[0]"},
		{func(a *policy.App, o *Options) { a.Sandbox.Strictness = "loose" }, "sandbox.strictness"},
		{func(a *policy.App, o *Options) { o.Strictness = "loose" }, "daemon setting"},
		{func(a *policy.App, o *Options) { a.Sandbox.Network = "udp" }, "sandbox.network"},
		{func(a *policy.App, o *Options) { a.Resources = []string{"share"} }, "resources"},
		{func(a *policy.App, o *Options) { a.Sandbox.External[0].Access = "x" }, "external"},
		{func(a *policy.App, o *Options) { a.Sandbox.External[0].Path = "Documents" }, "external"},
		{func(a *policy.App, o *Options) { o.Dirs.Home = "" }, "external"},
		{func(a *policy.App, o *Options) { a.Resources = []string{"/proc/self/cwd"} }, "daemon's own process"},
		{func(a *policy.App, o *Options) { a.Sandbox.External[0].Path = "/dev/fd" }, "daemon's own process"},
		// A grant that holds a kernel view, or octosup's own directories,
		// grants them too: "/" most of all, read-only as well as rw.
		{func(a *policy.App, o *Options) {
			a.Sandbox.External[0] = policy.External{Path: "/", Access: policy.AccessRO}
		}, "/proc"},
		{func(a *policy.App, o *Options) {
			a.Sandbox.External[0] = policy.External{Path: "/", Access: policy.AccessRW}
		}, "/proc"},
		{func(a *policy.App, o *Options) { a.Resources = []string{"/"} }, "/proc"},
	} {
		a, o := notesApp(), testOptions()
		a.Sandbox.External = slices.Clone(a.Sandbox.External)
		c.mut(&a, &o)
		_, err := Compile(a, o)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "jail: ") {
			t.Errorf("want an error about %s naming the app, got %v", c.want, err)
		}
	}
}

// randomApp is testing/quick's generator of manifest entries.
type randomApp struct {
	App  policy.App
	Opts Options
}

func (randomApp) Generate(r *rand.Rand, _ int) reflect.Value {
	pick := func(s ...string) string { return s[r.Intn(len(s))] }
	ports := func() []uint16 {
		var p []uint16
		for range r.Intn(4) {
			p = append(p, uint16(1+r.Intn(1024)))
		}
		return p
	}
	yes := r.Intn(2) == 0
	a := policy.App{
		ID:      pick("notes", "mail", "term"),
		Exec:    []string{pick("/usr/bin/app", "/opt/app/bin/app"), "--x"},
		Sandbox: policy.Sandbox{Policy: policy.SandboxPolicy(pick("jail", "broad")), Network: policy.Network(pick("none", "tcp", "full"))},
		Storage: policy.Storage{Jail: r.Intn(2) == 0, Secrets: r.Intn(2) == 0},
		Env:     map[string]string{"LANG": pick("C", "de_DE.UTF-8"), "OCTOSUP_X": "1"},
	}
	if r.Intn(3) > 0 {
		a.Sandbox.Processes = &yes
	}
	if a.Sandbox.Network == policy.NetworkTCP {
		a.Sandbox.TCPConnect, a.Sandbox.TCPBind = ports(), ports()
	}
	for range r.Intn(3) {
		a.Resources = append(a.Resources, pick("/usr/share/app", "/opt/app/share"))
	}
	for range r.Intn(4) {
		a.Sandbox.External = append(a.Sandbox.External, policy.External{
			Path: pick("~/Music", "~/Documents", "/srv/data", "/media/usb"), Access: policy.Access(pick("ro", "rw"))})
	}
	if r.Intn(4) == 0 {
		a.Sandbox.Strictness = pick("strict", "best-effort")
	}
	o := testOptions()
	o.DeveloperMode = r.Intn(2) == 0
	o.Strictness = Strictness(pick("", "strict", "best-effort"))
	return reflect.ValueOf(randomApp{a, o})
}

// TestCompileDeterministic: the same inputs give the same spec (maps in
// the inputs iterate in a different order every time).
func TestCompileDeterministic(t *testing.T) {
	f := func(in randomApp) bool {
		a, err := Compile(in.App, in.Opts)
		if err != nil {
			t.Log(err)
			return false
		}
		for range 3 {
			b, err := Compile(in.App, in.Opts)
			if err != nil || !reflect.DeepEqual(a, b) {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}

// TestNarrowOnlyRemoves: whatever the entry, OCTOSUP_SANDBOX_NARROW's spec
// grants nothing the plain spec does not.
func TestNarrowOnlyRemoves(t *testing.T) {
	f := func(in randomApp) bool {
		wide, err := Compile(in.App, in.Opts)
		if err != nil {
			t.Log(err)
			return false
		}
		o := in.Opts
		o.Narrowed = true
		narrow, err := Compile(in.App, o)
		if err != nil {
			t.Log(err)
			return false
		}
		if err := subsumes(wide, narrow); err != nil {
			t.Logf("%+v: %v", in.App, err)
			return false
		}
		// And it is jail-only with no network.
		return narrow.Landlock.FS && narrow.Landlock.Net && len(narrow.Landlock.ConnectTCP)+len(narrow.Landlock.BindTCP) == 0 &&
			slices.ContainsFunc(narrow.Seccomp, func(s Syscall) bool { return s.Name == "socket" && len(s.Args) == 0 }) &&
			!slices.ContainsFunc(narrow.Landlock.Paths, func(p PathRule) bool { return p.Why == "external" })
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
}

// subsumes reports how narrow grants something wide does not.
func subsumes(wide, narrow Spec) error {
	if !slices.Equal(wide.Env, narrow.Env) || !slices.Equal(wide.Argv, narrow.Argv) || wide.Program != narrow.Program || !slices.Equal(wide.FDs, narrow.FDs) {
		return fmt.Errorf("program, env or fds differ")
	}
	if wide.Strict && !narrow.Strict {
		return fmt.Errorf("strictness relaxed")
	}
	wl, nl := wide.Landlock, narrow.Landlock
	if wl.FS {
		if !nl.FS {
			return fmt.Errorf("files no longer narrowed")
		}
		for _, p := range nl.Paths {
			var granted Access
			for _, w := range wl.Paths {
				if w.Path == p.Path || strings.HasPrefix(p.Path, w.Path+"/") {
					granted |= w.Access
				}
			}
			if p.Access&^granted != 0 {
				return fmt.Errorf("%s gains %v", p.Path, p.Access&^granted)
			}
		}
	}
	if wl.Net {
		if !nl.Net {
			return fmt.Errorf("tcp no longer narrowed")
		}
		for _, p := range nl.ConnectTCP {
			if !slices.Contains(wl.ConnectTCP, p) {
				return fmt.Errorf("connect %d gained", p)
			}
		}
		for _, p := range nl.BindTCP {
			if !slices.Contains(wl.BindTCP, p) {
				return fmt.Errorf("bind %d gained", p)
			}
		}
	}
	if wl.Scope && !nl.Scope {
		return fmt.Errorf("scoping lost")
	}
	for _, r := range wide.Seccomp {
		// Covered by the same rule, or by refusing that syscall outright
		// (a call the daemon decides, by any refusal).
		if !slices.ContainsFunc(narrow.Seccomp, func(n Syscall) bool {
			return reflect.DeepEqual(n, r) || n.Name == r.Name && len(n.Args) == 0 && !n.Notify && (n.Errno == r.Errno || r.Notify)
		}) {
			return fmt.Errorf("syscall rule %s%s lost", r.Name, describeArgs(r.Args))
		}
	}
	return nil
}

func TestSpecRoundTrip(t *testing.T) {
	spec, err := Compile(notesApp(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec, back) {
		t.Errorf("round trip changed the spec:\n%+v\n%+v", spec, back)
	}
}

func TestDecodeSpecRefuses(t *testing.T) {
	spec, err := Compile(notesApp(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(spec)
	for _, c := range []struct {
		name string
		in   string
		want string
	}{
		{"unknown field", strings.Replace(string(good), `{"version":1`, `{"version":1,"extra":true`, 1), "unknown field"},
		{"trailing data", string(good) + "{}", "trailing"},
		{"old version", strings.Replace(string(good), `"version":1`, `"version":0`, 1), "version 0"},
		{"unknown right", strings.Replace(string(good), `["read","list"]`, `["read","own"]`, 1), "unknown access right"},
		{"relative program", strings.Replace(string(good), `"program":"/usr/lib/octos/notes"`, `"program":"notes"`, 1), "program"},
		{"bad errno", strings.Replace(string(good), `"errno":"EPERM"`, `"errno":"EIO"`, 1), "errno"},
		{"not json", "{", "invalid jail spec"},
	} {
		_, err := decodeSpec([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
	}
}

func FuzzDecodeSpec(f *testing.F) {
	// A broad app's spec: every field there, few rules, a small seed.
	app := notesApp()
	app.Sandbox.Policy = policy.PolicyBroad
	spec, err := Compile(app, testOptions())
	if err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSpec(b)
		if err != nil {
			return
		}
		// What the helper accepts is valid and survives a round trip.
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := decodeSpec(again)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %v", err)
		}
		_ = Describe(s)
	})
}

// TestUnixSocketsNamedMissing: a jail app that may make unix sockets
// reaches every pathname socket it can name below Landlock ABI 9, and
// the report says so; a tcp app may not make them there at all.
func TestUnixSocketsNamedMissing(t *testing.T) {
	for _, c := range []struct {
		network policy.Network
		abi     int
		unix    bool // Landlock's unix-socket rule asked for (ABI 9)
		sockets bool // socket(AF_UNIX) allowed
	}{
		// Full below ABI 9: the guard decides every unix connect, so no
		// Landlock rule is missing, and the app may make unix sockets.
		{policy.NetworkFull, 7, false, true},
		{policy.NetworkTCP, 7, false, false},
		{policy.NetworkTCP, 9, true, true},
		{policy.NetworkNone, 9, false, false},
	} {
		app := notesApp()
		app.Sandbox.Network = c.network
		if c.network != policy.NetworkTCP {
			app.Sandbox.TCPConnect, app.Sandbox.TCPBind = nil, nil
		}
		o := testOptions()
		o.LandlockABI = c.abi
		spec, err := Compile(app, o)
		if err != nil {
			t.Fatal(err)
		}
		missing := slices.Contains(helper.LandlockMissing(spec.Landlock, 7), "landlock.unix")
		if spec.Landlock.UnixSockets != c.unix || missing != c.unix || c.unix && spec.Landlock.MinABI != 9 {
			t.Errorf("%s at ABI %d: unix_sockets %v, missing at ABI 7 %v, min_abi %d; want %v", c.network, c.abi, spec.Landlock.UnixSockets, missing, spec.Landlock.MinABI, c.unix)
		}
		refused := slices.ContainsFunc(spec.Seccomp, func(r Syscall) bool {
			return r.Name == "socket" && len(r.Args) == 1 && r.Args[0].Value == unix.AF_UNIX
		}) || slices.ContainsFunc(spec.Seccomp, func(r Syscall) bool { return r.Name == "socket" && len(r.Args) == 0 })
		if refused == c.sockets {
			t.Errorf("%s at ABI %d: socket(AF_UNIX) refused %v, want %v", c.network, c.abi, refused, !c.sockets)
		}
	}
}

// DecodeSpec parses a spec's JSON form (what octosupctl --json jail
// prints) strictly: unknown fields, trailing data or an invalid spec are
// errors.
func decodeSpec(b []byte) (Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", helper.ErrBadSpec, err)
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%w: trailing data after the spec", helper.ErrBadSpec)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}
