package jail

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/spawn"
	"octosup/policy"
)

// TestJailedProcess checks layers 1–3 from inside a jailed app: what the
// kernel says of its descriptors, privileges and environment.
func TestJailedProcess(t *testing.T) {
	t.Run("fork", func(t *testing.T) { testJailedProcess(t, false) })
	t.Run("helper", func(t *testing.T) { testJailedProcess(t, true) })
}

func testJailedProcess(t *testing.T, useHelper bool) {
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
	base := []string{"HOME=" + h.dirs.Home, "PATH=/usr/bin:/bin", "OCTOS_TOKEN=secret", "OCTOSUP_SANDBOX_NARROW=", "NOTIFY_SOCKET=/run/x", "LISTEN_FDS=3", "WATCHDOG_USEC=1"}
	// A descriptor the daemon has open without close-on-exec must not
	// reach the app either.
	leak, err := unix.Open("/etc/hostname", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)

	o := h.runApp(h.probeApp("basics", "fds"), base, nil)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.out != "[0 1 2 3]" {
		t.Errorf("fds in the app: %s, want [0 1 2 3]", o.out)
	}
	want := []string{"env", "fds", "no_new_privs", "caps", "landlock", "seccomp"}
	if !slices.Equal(o.report.Layers, want) || !slices.Equal(o.report.Missing, asUser()) || o.report.LandlockABI != helper.LandlockABI() {
		t.Errorf("report %+v, want layers %v, missing %q, ABI %d", o.report, want, asUser(), helper.LandlockABI())
	}

	o = h.runApp(h.probeApp("basics", "status"), base, nil)
	fields := strings.Fields(o.out)
	for _, f := range []string{"NoNewPrivs=1", "Seccomp=2", "CapInh=0000000000000000", "CapPrm=0000000000000000", "CapEff=0000000000000000", "CapAmb=0000000000000000", "Pdeathsig=9", "OwnGroup=true"} {
		if !slices.Contains(fields, f) {
			t.Errorf("/proc/self/status of the app lacks %s: %s", f, o.out)
		}
	}
	if os.Geteuid() == 0 && !slices.Contains(fields, "CapBnd=0000000000000000") {
		t.Errorf("bounding set kept under a root daemon: %s", o.out)
	}

	o = h.runApp(h.probeApp("basics", "env"), base, nil)
	env := strings.Split(o.out, "\n")
	for _, gone := range []string{"OCTOS_TOKEN", "OCTOSUP_SANDBOX_NARROW", "NOTIFY_SOCKET", "LISTEN_FDS", "WATCHDOG_USEC"} {
		for _, kv := range env {
			if strings.HasPrefix(kv, gone+"=") {
				t.Errorf("app sees %s", kv)
			}
		}
	}
	for _, kv := range []string{"HOME=" + h.dirs.Home, EnvAppID + "=basics", EnvHubFD + "=3", EnvJail + "=" + h.dirs.JailDir("basics"), EnvSecrets + "=" + h.dirs.SecretsDir("basics")} {
		if !slices.Contains(env, kv) {
			t.Errorf("app lacks %s in %q", kv, env)
		}
	}
	// A jail app's environment is an allow list: what a terminal exported
	// stays out unless the entry passes it, and PATH keeps only granted
	// directories. A broad app keeps the daemon's (minus the reserved).
	terminal := append(slices.Clone(base[1:]), "HOME="+h.dirs.Home, "TMUX=/tmp/tmux-0/default,1,0", "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
		"MAKEFLAGS=-j2", "AWS_SECRET_ACCESS_KEY=k", "GTK_THEME=Adwaita", "LC_TIME=C", "TZ=UTC", "LOGNAME=ada",
		"PATH="+filepath.Join(h.dirs.Home, "bin")+":/usr/bin:/opt/tools:/bin")
	for _, c := range []struct {
		mut        func(a *policy.App)
		want, gone []string
	}{
		{func(*policy.App) {}, []string{"LC_TIME=C", "TZ=UTC", "LOGNAME=ada", "HOME=" + h.dirs.Home, "PATH=/usr/bin:/bin"},
			[]string{"TMUX", "SSH_AUTH_SOCK", "MAKEFLAGS", "AWS_SECRET_ACCESS_KEY", "GTK_THEME"}},
		{func(a *policy.App) { a.PassEnv = []string{"GTK_THEME", "OCTOS_TOKEN"} }, []string{"GTK_THEME=Adwaita", "PATH=/usr/bin:/bin"},
			[]string{"TMUX", "SSH_AUTH_SOCK", "OCTOS_TOKEN"}},
		{func(a *policy.App) { a.Env = map[string]string{"PATH": "/opt/tools"} }, []string{"PATH=/opt/tools"}, []string{"TMUX"}},
		{withBroad, []string{"TMUX=/tmp/tmux-0/default,1,0", "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1", "GTK_THEME=Adwaita"},
			[]string{"OCTOS_TOKEN", "NOTIFY_SOCKET", "LISTEN_FDS"}},
	} {
		app := h.probeApp("basics", "env")
		c.mut(&app)
		o := h.runApp(app, terminal, nil)
		env := strings.Split(o.out, "\n")
		for _, kv := range c.want {
			if !slices.Contains(env, kv) {
				t.Errorf("%s app lacks %s in %q", app.Sandbox.Policy, kv, env)
			}
		}
		for _, name := range c.gone {
			for _, kv := range env {
				if strings.HasPrefix(kv, name+"=") {
					t.Errorf("%s app (pass_env %v) sees %s", app.Sandbox.Policy, app.PassEnv, kv)
				}
			}
		}
	}
	for _, d := range []string{h.dirs.JailDir("basics"), h.dirs.SecretsDir("basics")} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", d, st.Mode(), err)
		}
	}
}

// TestSignalsStartClean: the app starts with no signal blocked or
// ignored, however the daemon's thread that forked it was masked (the
// in-process spawn blocks every signal across its fork) and whatever the
// daemon ignores, and with its own /proc/self readable. The program is grep, not Go: a Go runtime changes its mask
// at start.
func TestSignalsStartClean(t *testing.T) {
	grep, err := exec.LookPath("grep")
	if err != nil {
		t.Skip("no grep:", err)
	}
	// A signal this process ignores must not stay ignored in the app
	// (SIGUSR1: 0x200 in SigIgn).
	signal.Ignore(syscall.SIGUSR1)
	defer signal.Reset(syscall.SIGUSR1)
	for _, useHelper := range []bool{false, true} {
		h := newHarness(t)
		h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
		no := false
		app := policy.App{ID: "signals", Exec: []string{grep, "^Sig", "/proc/self/status"},
			Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &no}}
		o := h.runApp(app, []string{"PATH=/usr/bin:/bin"}, nil)
		if o.err != nil {
			t.Fatalf("UseHelper %v: %v", useHelper, o.err)
		}
		if !strings.Contains(o.out, "SigBlk:\t0000000000000000") {
			t.Errorf("UseHelper %v: the app starts with signals blocked:\n%s", useHelper, o.out)
		}
		if !strings.Contains(o.out, "SigIgn:\t0000000000000000") {
			t.Errorf("UseHelper %v: the app starts with signals ignored:\n%s", useHelper, o.out)
		}
		if o.forked == useHelper {
			t.Errorf("UseHelper %v: spawned in-process %v", useHelper, o.forked)
		}
	}
}

// TestSignalsStartCleanUnderTmux runs TestSignalsStartClean in a copy of
// this binary whose parent ignored SIGTTIN and SIGTTOU, as a tmux pane or
// nohup does (and SIGHUP): the Go runtime keeps those ignored without
// saying so through os/signal, and apps had SigIgn 0x300000.
func TestSignalsStartCleanUnderTmux(t *testing.T) {
	if os.Getenv("OCTOSUP_TEST_INHERITED_IGNORE") != "" {
		t.Skip("this is the inner run")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, "-c", `trap "" TTIN TTOU HUP; exec "$0" -test.run='^TestSignalsStartClean$' -test.count=1 -test.v`, exe)
	cmd.Env = append(os.Environ(), "OCTOSUP_TEST_INHERITED_IGNORE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSignalsStartClean") {
		t.Fatalf("with SIGTTIN, SIGTTOU and SIGHUP ignored by the parent: %v\n%s", err, out)
	}
}

// TestNarrow: OCTOSUP_SANDBOX_NARROW takes a network: full app with an
// external to jail-only and no network.
func TestNarrow(t *testing.T) {
	h := newHarness(t)
	ext := filepath.Join(h.dirs.Home, "Music")
	if err := os.MkdirAll(ext, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ext, "song"), []byte("la"), 0o644); err != nil {
		t.Fatal(err)
	}
	app := func(args ...string) policy.App {
		a := h.probeApp("wide", args...)
		a.Sandbox.Network = policy.NetworkFull
		a.Sandbox.External = []policy.External{{Path: "~/Music", Access: policy.AccessRW}}
		return a
	}
	narrow := []string{"PATH=/bin", EnvNarrow + "=other, wide"}
	for _, c := range []struct {
		args         []string
		wide, narrow string
	}{
		{[]string{"udp"}, "ok", "EPERM"},
		{[]string{"read", filepath.Join(ext, "song")}, "ok", "EACCES"},
		{[]string{"write", filepath.Join(h.dirs.JailDir("wide"), "x")}, "ok", "ok"},
	} {
		if got := h.runApp(app(c.args...), nil, nil).out; got != c.wide {
			t.Errorf("%v unnarrowed: %s, want %s", c.args, got, c.wide)
		}
		if got := h.runApp(app(c.args...), narrow, nil).out; got != c.narrow {
			t.Errorf("%v narrowed by the environment: %s, want %s", c.args, got, c.narrow)
		}
	}
	// The Launcher's own setting narrows too.
	h.l = NewLauncher(Config{HelperPath: h.helper, Narrow: []string{"wide"}})
	if got := h.runApp(app("udp"), nil, nil).out; got != "EPERM" {
		t.Errorf("udp narrowed by Config.Narrow: %s, want EPERM", got)
	}
}

// TestJailFailure: a jail that cannot be applied never runs the program;
// Start or Confirm names the layer, and the errno where there is one. The
// same for both paths: spawned in-process and through the helper.
func TestJailFailure(t *testing.T) {
	t.Run("fork", func(t *testing.T) { testJailFailure(t, false) })
	t.Run("helper", func(t *testing.T) { testJailFailure(t, true) })
}

func testJailFailure(t *testing.T, useHelper bool) {
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
	good, err := h.l.Spec(Request{App: h.probeApp("fail", "getpid"), Dirs: h.dirs})
	if err != nil {
		t.Fatal(err)
	}
	if err := prepareDirs(Request{App: h.probeApp("fail"), Dirs: h.dirs}); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(s *Spec)) Spec {
		s := good
		s.Landlock.Paths = slices.Clone(good.Landlock.Paths)
		f(&s)
		return s
	}
	cases := []struct {
		name    string
		spec    Spec
		want    string
		errno   unix.Errno
		inChild bool // found after the fork
	}{
		{"missing resource", mut(func(s *Spec) {
			s.Landlock.Paths = append(s.Landlock.Paths, PathRule{Path: "/nonexistent/octosup", Access: AccessRO, Why: "resource"})
		}), "landlock: open /nonexistent/octosup: ENOENT", unix.ENOENT, false},
		{"strict above the kernel", mut(func(s *Spec) { s.Strict = true; s.Landlock.MinABI = helper.LandlockABI() + 1 }),
			"jail: landlock ABI " + strconv.Itoa(helper.LandlockABI()) + " < " + strconv.Itoa(helper.LandlockABI()+1), 0, false},
		{"daemon gone", mut(func(s *Spec) { s.ParentPID = 2 }), "pdeathsig: daemon (pid 2) is gone", 0, true},
		{"invalid spec", mut(func(s *Spec) { s.FDs = []int{0, 1, 2, 3, 7} }), "spec: invalid jail spec: fds", 0, false},
		{"no working directory", mut(func(s *Spec) { s.Dir = "/nonexistent/octosup" }), "dir: chdir /nonexistent/octosup: ENOENT", unix.ENOENT, true},
		{"program vanished", mut(func(s *Spec) {
			s.Landlock.FS, s.Landlock.Paths = false, nil
			s.Program = "/nonexistent/octosup"
		}), "exec: /nonexistent/octosup: ENOENT", unix.ENOENT, true},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			o := h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
				return h.l.startSpec(c.spec, stdout, stderr, hub)
			}, nil)
			if o.err == nil {
				t.Fatalf("the program ran (%q)", o.out)
			}
			if o.report.Layers != nil {
				t.Errorf("a failed start reported layers %v", o.report.Layers)
			}
			// The failures the child itself finds (after the fork) must
			// come from the path asked for, not a silent fallback.
			if c.inChild && o.forked == useHelper {
				t.Errorf("spawned in-process %v with UseHelper %v", o.forked, useHelper)
			}
			var le *LayerError
			if !errors.As(o.err, &le) || !strings.HasPrefix(o.err.Error(), c.want) {
				t.Fatalf("Confirm: %v (%T), want %q…", o.err, o.err, c.want)
			}
			if c.errno != 0 && !errors.Is(o.err, c.errno) {
				t.Errorf("%v is not %v", o.err, c.errno)
			}
			if o.out != "" {
				t.Errorf("the program printed %q", o.out)
			}
		})
	}
	// A strict app on a kernel that has everything starts.
	strictApp := h.probeApp("fail", "getpid")
	strictApp.Sandbox.Strictness = string(Strict)
	if o := h.runApp(strictApp, nil, nil); o.err != nil {
		t.Errorf("strict app on ABI %d: %v", helper.LandlockABI(), o.err)
	}
}

// TestHelperRefusesFilter: the helper, and the in-process spawn, load only
// a filter that begins with the native architecture check, whatever the
// cache holds; a filter without it never runs the program.
func TestHelperRefusesFilter(t *testing.T) {
	for _, useHelper := range []bool{false, true} {
		h := newHarness(t)
		h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
		testRefusesFilter(t, h)
	}
}

func testRefusesFilter(t *testing.T, h *harness) {
	req := Request{App: h.probeApp("filter", "getpid"), Dirs: h.dirs}
	spec, err := h.l.Spec(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := prepareDirs(req); err != nil {
		t.Fatal(err)
	}
	good, err := h.l.filters.get(spec.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	// Skip the arch load: the program still ends in verdicts the kernel
	// would take.
	h.l.filters.entries[0].prog = good[1:]
	o := h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
		return h.l.startSpec(spec, stdout, stderr, hub)
	}, nil)
	if o.err == nil || !strings.Contains(o.err.Error(), ": invalid seccomp filter: does not begin with a load of seccomp_data.arch") {
		t.Fatalf("Confirm: %v, want the helper to refuse the filter", o.err)
	}
	if o.out != "" {
		t.Errorf("the program ran: %q", o.out)
	}
}

// TestReexecHelper: a binary that is its own helper (Config.HelperPath
// empty: this test binary re-executed, dispatching IsHelper in TestMain,
// as the supervisor's and daemon's tests do) runs the same helper code
// as octosup-jail and jails the app alike.
func TestReexecHelper(t *testing.T) {
	h := newHarness(t)
	h.l = NewLauncher(Config{})
	o := h.runApp(h.probeApp("reexec", "read", "/etc/passwd"), nil, nil)
	want := []string{"env", "fds", "no_new_privs", "caps", "landlock", "seccomp"}
	if o.err != nil || o.out != "ok" || !slices.Equal(o.report.Layers, want) {
		t.Fatalf("re-exec helper: %+v, want ok with layers %v", o, want)
	}
	if o := h.runApp(h.probeApp("reexec", "keyctl"), nil, nil); o.err != nil || o.out != "EPERM" {
		t.Errorf("keyctl under the re-exec helper: %+v, want EPERM", o)
	}
}

// TestStartErrors: what Start refuses before forking.
func TestStartErrors(t *testing.T) {
	h := newHarness(t)
	app := h.probeApp("gone")
	app.Exec = []string{"/nonexistent/octosup-app"}
	_, err := h.l.Start(Request{App: app, Dirs: h.dirs})
	if !errors.Is(err, ErrNoProgram) {
		t.Errorf("missing program: %v, want ErrNoProgram", err)
	}
	if _, err := h.l.Start(Request{App: h.probeApp("nohub"), Dirs: h.dirs}); !errors.Is(err, ErrNoHub) {
		t.Errorf("no hub: %v, want ErrNoHub", err)
	}
	app = h.probeApp("bad")
	app.Sandbox.Strictness = "sometimes"
	if _, err := h.l.Start(Request{App: app, Dirs: h.dirs}); err == nil || !strings.Contains(err.Error(), "sandbox.strictness") {
		t.Errorf("bad strictness: %v", err)
	}
}

// statusRecords is what the helper writes on its status pipe: a record
// (step, errno) per pair.
func statusRecords(steps ...int32) []byte {
	var b []byte
	for _, s := range steps {
		b = binary.NativeEndian.AppendUint32(b, uint32(s))
	}
	return b
}

func TestParseStatus(t *testing.T) {
	spec := Spec{Program: "/x", Dir: "/d", ParentPID: 7}
	for _, c := range []struct {
		name string
		in   []byte
		want string // error text, "" for success
	}{
		{"reached exec", statusRecords(int32(spawn.StepOK), 0), ""},
		{"exec failed", statusRecords(int32(spawn.StepOK), 0, int32(spawn.StepExec), 2), "exec: /x: ENOENT"},
		{"chdir failed", statusRecords(int32(spawn.StepDir), 2), "dir: chdir /d: ENOENT"},
		{"daemon gone", statusRecords(int32(spawn.StepParentGone), 3), "pdeathsig: daemon (pid 7) is gone"},
		{"another build's input", statusRecords(int32(spawn.StepInputBad), 22), "spec: invalid jail spec: not a jail helper input of this build"},
		{"nothing", nil, "jail: jail helper ended without a report"},
		{"half a record", statusRecords(int32(spawn.StepOK)), "jail: bad helper status (4 bytes)"},
		{"unknown step", statusRecords(99, 1), "jail: the setup sequence failed at unknown step 99"},
	} {
		err := parseStatus(c.in, spec)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add(statusRecords(int32(spawn.StepOK), 0))
	f.Add(statusRecords(int32(spawn.StepLandlockRestrict), 22))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := parseStatus(b, Spec{})
		var le *LayerError
		if err != nil && !errors.As(err, &le) && !errors.Is(err, ErrHelperDied) && !strings.Contains(err.Error(), "unknown step") {
			t.Errorf("%x: %v is neither a LayerError nor ErrHelperDied", b, err)
		}
	})
}

// TestNoLandlockNoLayer: a helper with nothing for Landlock to enforce
// (NewRulesetFD gives -1) does not report the layer.
func TestNoLandlockNoLayer(t *testing.T) {
	for _, useHelper := range []bool{false, true} {
		h := newHarness(t)
		h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
		testNoLandlockNoLayer(t, h)
	}
}

func testNoLandlockNoLayer(t *testing.T, h *harness) {
	req := Request{App: h.probeApp("bare", "getpid"), Dirs: h.dirs}
	spec, err := h.l.Spec(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := prepareDirs(req); err != nil {
		t.Fatal(err)
	}
	spec.Landlock = LandlockSpec{}
	o := h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
		return h.l.startSpec(spec, stdout, stderr, hub)
	}, nil)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if slices.Contains(o.report.Layers, "landlock") || !slices.Equal(o.report.Missing, asUser()) {
		t.Errorf("report %+v: landlock reported though nothing was enforced", o.report)
	}
	if o.out == "" {
		t.Error("the program printed nothing")
	}
}

// TestPrivateDirsByDescriptor: the jail and secrets directories are made
// and checked by descriptor. A symlink put in the place of an app's jail
// (by anything that could write the user's data directory) is refused
// before anything is chmod'ed or granted, as is a directory of another
// user; the target keeps its mode.
func TestPrivateDirsByDescriptor(t *testing.T) {
	h := newHarness(t)
	target := filepath.Join(filepath.Dir(h.dirs.Home), "elsewhere")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"jails", "secrets"} {
		link := filepath.Join(h.dirs.Data, sub, "probe")
		if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		o := h.runApp(h.probeApp("probe", "noop"), nil, nil)
		if o.err == nil || !strings.Contains(o.err.Error(), "not a real directory") {
			t.Errorf("%s/probe a symlink: %+v, want the start refused", sub, o)
		}
		if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("the symlink's target: %v %v, want it left 0755", st.Mode(), err)
		}
		os.Remove(link)
	}
	// A symlink higher up, below the data directory, is refused too.
	jails := filepath.Join(h.dirs.Data, "jails")
	if err := os.RemoveAll(jails); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, jails); err != nil {
		t.Fatal(err)
	}
	if o := h.runApp(h.probeApp("probe", "noop"), nil, nil); o.err == nil {
		t.Errorf("jails/ a symlink: %+v, want the start refused", o)
	}
	os.Remove(jails)
	if os.Geteuid() == 0 {
		dir := h.dirs.JailDir("probe")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if o := h.runApp(h.probeApp("probe", "noop"), nil, nil); o.err == nil || !strings.Contains(o.err.Error(), "belongs to uid 65534") {
			t.Errorf("a jail of another user: %+v, want the start refused", o)
		}
		os.Chown(dir, 0, 0)
	}
	// And the positive control: a fresh start makes both, 0700.
	if o := h.runApp(h.probeApp("probe", "noop"), nil, nil); o.err != nil || o.out != "ok" {
		t.Fatalf("a plain start: %+v", o)
	}
}

// TestPlantedSymlinkIsNotFollowed: an app with rw on ~/src, and an
// external below it, plants a symlink in the place of that external (or
// of a directory above it), which leads to a secret it was never
// granted. At its next start the grant must not follow the planted link:
// the daemon resolves externals at every start, and it followed it, so
// the app read the secret. The start is refused and names the link.
func TestPlantedSymlinkIsNotFollowed(t *testing.T) {
	t.Run("fork", func(t *testing.T) { testPlantedSymlink(t, false) })
	t.Run("helper", func(t *testing.T) { testPlantedSymlink(t, true) })
}

func testPlantedSymlink(t *testing.T, useHelper bool) {
	for _, c := range []struct {
		name      string
		external  string // ro, below ~/src
		swap      string // what the app replaces with a link to ~/secret
		read      string // what it reads after, through the external
		neighbour bool   // the rw grant is another jail app's, which plants
	}{
		{"the external itself", "src/data", "src/data", "src/data/key", false},
		{"a directory above it", "src/vendor/lib", "src/vendor", "src/vendor/lib/key", false},
		{"planted by another app", "src/data", "src/data", "src/data/key", true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			h := newHarness(t)
			h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
			home := h.dirs.Home
			for _, d := range []string{"src", c.external, "secret/lib"} {
				if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// ~/secret holds what the link will point at: key in both
			// layouts (secret/key and secret/lib/key).
			for _, f := range []string{"secret/key", "secret/lib/key"} {
				if err := os.WriteFile(filepath.Join(home, f), []byte("s3cret"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rw := policy.External{Path: filepath.Join(home, "src"), Access: policy.AccessRW}
			ro := policy.External{Path: filepath.Join(home, c.external), Access: policy.AccessRO}
			app := func(args ...string) policy.App {
				a := h.probeApp("probe", args...)
				a.Sandbox.External = []policy.External{rw, ro}
				if c.neighbour {
					a.Sandbox.External = []policy.External{ro}
				}
				return a
			}
			planter := app
			var neighbours []policy.App
			if c.neighbour {
				planter = func(args ...string) policy.App {
					a := h.probeApp("planter", args...)
					a.Sandbox.External = []policy.External{rw}
					return a
				}
				neighbours = []policy.App{planter("noop")}
			}
			run := func(a policy.App) outcome {
				return h.runWith(func(stdout, stderr, hub *os.File) (*Process, error) {
					return h.l.Start(Request{App: a, Neighbours: neighbours, Dirs: h.dirs, Stdout: stdout, Stderr: stderr, Hub: hub})
				}, nil)
			}
			// Positive control: the secret is out of reach to begin with.
			if o := run(app("read", filepath.Join(home, "secret/key"))); o.err != nil || o.out != "EACCES" {
				t.Fatalf("read ~/secret/key before: %+v, want EACCES", o)
			}
			swap := filepath.Join(home, c.swap)
			for _, step := range [][]string{
				{"rename", swap, swap + ".old"},
				{"symlink", filepath.Join(home, "secret"), swap},
			} {
				if o := run(planter(step...)); o.err != nil || o.out != "ok" {
					t.Fatalf("%v inside the rw grant: %+v, want ok", step, o)
				}
			}
			if st, err := os.Lstat(swap); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the app's link is not there: %v %v", st, err)
			}
			o := run(app("read", filepath.Join(home, c.read)))
			if o.err == nil && o.out == "ok" {
				t.Fatalf("the app read ~/secret through its planted link %s", swap)
			}
			if o.err == nil || !strings.Contains(o.err.Error(), swap) {
				t.Errorf("start after the swap: %+v, want it refused naming %s", o, swap)
			}
		})
	}
}

// TestGuardDoesNotFollowAPlantedRoot: an app with rw on ~/src and ro on
// ~/src/lib, running, replaces ~/src/lib with a link to ~/secret and
// watches ~/src/lib. The guard matched the grant ~/src/lib and opened it
// by path, following the link: the watch reported the names of files
// made in ~/secret. Positive control: the same watch on the real
// directory is let through.
func TestGuardDoesNotFollowAPlantedRoot(t *testing.T) {
	t.Run("fork", func(t *testing.T) { testGuardPlantedRoot(t, false) })
	t.Run("helper", func(t *testing.T) { testGuardPlantedRoot(t, true) })
}

func testGuardPlantedRoot(t *testing.T, useHelper bool) {
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
	home := h.dirs.Home
	for _, d := range []string{"src/lib", "secret"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib, secret := filepath.Join(home, "src/lib"), filepath.Join(home, "secret")
	app := func(args ...string) policy.App {
		a := h.probeApp("probe", args...)
		a.Sandbox.External = []policy.External{
			{Path: filepath.Join(home, "src"), Access: policy.AccessRW},
			{Path: lib, Access: policy.AccessRO},
		}
		return a
	}
	if o := h.runApp(app("inotify", lib), nil, nil); o.err != nil || o.out != "ok" {
		t.Fatalf("watch the granted ~/src/lib: %+v, want ok", o)
	}
	if o := h.runApp(app("inotify", secret), nil, nil); o.err != nil || o.out != "EACCES" {
		t.Fatalf("watch ~/secret: %+v, want EACCES", o)
	}
	if o := h.runApp(app("inotify_swap", lib, secret), nil, nil); o.err != nil || o.out == "ok" {
		t.Errorf("watch ~/src/lib while it is a link to ~/secret: %+v, want it refused", o)
	}
	if st, err := os.Lstat(lib); err != nil || !st.IsDir() {
		t.Fatalf("the probe did not put ~/src/lib back: %v %v", st, err)
	}
}

// TestPlantedSymlinkRace: something flips ~/src/lib between the real
// directory and a link to ~/secret (renameat2 RENAME_EXCHANGE, as fast
// as it can) while an app granted rw ~/src and ro ~/src/lib is started
// again and again. The daemon resolved the grant in one walk and checked
// for planted links in another: when the first saw the link and the
// second the directory, ~/secret was granted (3 of 41 starts in the
// review). Who flips does not matter to the daemon's race, so the test
// process does.
func TestPlantedSymlinkRace(t *testing.T) {
	h := newHarness(t)
	home := h.dirs.Home
	for _, d := range []string{"src/lib", "secret"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "secret/key"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "src/lib/key"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	lib, flip := filepath.Join(home, "src/lib"), filepath.Join(home, "src/flip")
	if err := os.Symlink(filepath.Join(home, "secret"), flip); err != nil {
		t.Fatal(err)
	}
	app := h.probeApp("probe", "cat", filepath.Join(lib, "key"))
	app.Sandbox.External = []policy.External{
		{Path: filepath.Join(home, "src"), Access: policy.AccessRW},
		{Path: lib, Access: policy.AccessRO},
	}
	stop := make(chan struct{})
	flipped := make(chan int)
	go func() {
		n := 0
		defer func() { flipped <- n }()
		for {
			select {
			case <-stop:
				// Leave the real directory in place.
				if st, err := os.Lstat(lib); err == nil && st.Mode()&os.ModeSymlink != 0 {
					unix.Renameat2(unix.AT_FDCWD, lib, unix.AT_FDCWD, flip, unix.RENAME_EXCHANGE)
				}
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, lib, unix.AT_FDCWD, flip, unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	}()
	const starts = 60
	read, refused := 0, 0
	for range starts {
		o := h.runApp(app, nil, nil)
		switch {
		case strings.Contains(o.out, "s3cret"):
			read++
		case o.err != nil:
			refused++
		}
	}
	close(stop)
	n := <-flipped
	t.Logf("%d starts while the directory flipped %d times: %d refused", starts, n, refused)
	if read > 0 {
		t.Errorf("%d of %d starts read ~/secret through the flipping link", read, starts)
	}
	if refused == 0 {
		t.Errorf("no start saw the link: the race was not run (%d flips)", n)
	}
}

// TestHelperRefusesInput: a helper given an input it cannot take (a
// daemon of another build's, or garbage) runs nothing and says why on its
// status pipe, as octosup-jail and as a binary that is its own helper.
func TestHelperRefusesInput(t *testing.T) {
	h := newHarness(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := h.l.Spec(Request{App: h.probeApp("input", "getpid"), Dirs: h.dirs})
	if err != nil {
		t.Fatal(err)
	}
	good := func() []byte {
		in := spawn.NewInput(&spawn.Params{Dir: "/", RulesetFD: -1, NotifySock: -1, ParentPID: os.Getpid()})
		defer in.Free()
		return slices.Clone(in.Bytes())
	}()
	other := slices.Clone(good)
	other[7]++ // the version byte
	for _, bin := range []string{h.helper, self} {
		for _, c := range []struct {
			name, want string
			in         []byte
		}{
			{"another build's", "spec: invalid jail spec: not a jail helper input of this build", other},
			{"garbage", "spec: invalid jail spec: not a jail helper input of this build", []byte("{\"version\":1}")},
			{"empty", "spec: read the helper's input: EINVAL", nil},
		} {
			t.Run(filepath.Base(bin)+"/"+c.name, func(t *testing.T) {
				err := runHelperWith(t, bin, c.in, spec)
				if err == nil || !strings.HasPrefix(err.Error(), c.want) {
					t.Errorf("helper status: %v, want %q", err, c.want)
				}
			})
		}
	}
}

// runHelperWith runs bin as the helper with input in its memfd, and
// returns what its status says.
func runHelperWith(t *testing.T, bin string, input []byte, spec Spec) error {
	t.Helper()
	fd, err := unix.MemfdCreate("test-input", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	memfd := os.NewFile(uintptr(fd), "input")
	defer memfd.Close()
	if _, err := memfd.Write(input); err != nil {
		t.Fatal(err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	cmd := exec.Command(bin, HelperArg)
	cmd.ExtraFiles = []*os.File{os.Stdin, statusW, memfd} // 3, StatusFD, InputFD
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	statusW.Close()
	serr := readStatus(statusR, spec)
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != spawn.Exit {
		t.Errorf("helper exit: %v, want %d", err, spawn.Exit)
	}
	return serr
}

// TestHelperWithoutCgo: octosup-jail built with CGO_ENABLED=0 (a plain
// `go build ./...` on a machine set that way) has no setup sequence: it
// runs nothing and says why, and a start through it fails with that.
func TestHelperWithoutCgo(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	bin := filepath.Join(t.TempDir(), HelperName)
	cmd := exec.Command(gobin, "build", "-o", bin, "octosup/cmd/octosup-jail")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: bin, UseHelper: true})
	o := h.runApp(h.probeApp("nocgo", "getpid"), nil, nil)
	const want = "spec: the jail helper was built without cgo"
	if o.err == nil || !strings.HasPrefix(o.err.Error(), want) || o.out != "" {
		t.Fatalf("start through a helper without cgo: %+v, want %q…", o, want)
	}
}

// asUser is what a report says is missing where nothing else is: a root
// daemon's apps do not run as an unprivileged user.
func asUser() []string {
	if os.Geteuid() == 0 {
		return []string{MissingUser}
	}
	return []string{}
}

// startSpec starts spec, in the daemon's cgroup, by the path Start would
// take. Tests use it to start specs no manifest can produce.
func (l *Launcher) startSpec(spec Spec, stdout, stderr, hub *os.File) (*Process, error) {
	return l.start(spec, stdout, stderr, hub, -1)
}
