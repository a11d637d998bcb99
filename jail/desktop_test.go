package jail

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/pulsefilter"
	"octosup/policy"
)

// The desktop tests run real servers: a headless weston, a PulseAudio,
// a PipeWire. Each is required (.ci/run installs them): a machine
// without them fails the test, it does not skip it.

// needProgram is the path of a program the test cannot do without.
func needProgram(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: the desktop tests need it (.ci/run installs weston, wayland-utils, pulseaudio-utils, pulseaudio, pipewire, pipewire-pulse)", name)
	}
	return p
}

// runtimeDir is a user runtime directory for the test's servers: short
// (a socket path holds 107 bytes), 0700, readable by the test's user.
func runtimeDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "octo-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitListening returns once something listens on the unix socket path,
// woken by inotify as the directory changes; it fails the test when
// proc exits first or after a deadline.
func waitListening(t testing.TB, path string, proc *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, filepath.Dir(path), unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	buf := make([]byte, 4096)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it listened on %s", proc.Path, path)
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: nothing listens on %s after 20s", proc.Path, path)
		}
		// A change in the directory, or 50ms: bind and listen are two
		// calls, and a socket seen between them refuses.
		pfd := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		unix.Poll(pfd, int(min(left, 50*time.Millisecond)/time.Millisecond))
		unix.Read(in, buf)
	}
}

// startServer runs cmd until the test ends and waits until it listens
// on sock.
func startServer(t testing.TB, cmd *exec.Cmd, sock string) {
	t.Helper()
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(unix.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	waitListening(t, sock, cmd, exited)
}

// weston is a headless compositor of the test's.
type weston struct {
	dir, name, sock, log string
}

// startWeston runs a headless weston on dir/name that logs the protocol
// (the proof that a client drew: its commits and frame callbacks).
func startWeston(t testing.TB, dir, name string) weston {
	t.Helper()
	bin := needProgram(t, "weston")
	w := weston{dir: dir, name: name, sock: filepath.Join(dir, name), log: filepath.Join(dir, name+".log")}
	cmd := exec.Command(bin, "--backend=headless-backend.so", "--socket="+name, "--idle-time=0",
		"--log="+w.log, "--logger-scopes=log,proto")
	cmd.Env = []string{"XDG_RUNTIME_DIR=" + dir, "HOME=" + dir, "PATH=/usr/bin:/bin"}
	startServer(t, cmd, w.sock)
	return w
}

// startPulse runs a PulseAudio server of the test's on dir/pulse/native.
func startPulse(t testing.TB, dir string) string {
	t.Helper()
	bin := needProgram(t, "pulseaudio")
	sock := filepath.Join(dir, "pulse", "native")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=yes", "--use-pid-file=no",
		"-L", "module-native-protocol-unix socket="+sock+" auth-anonymous=1", "-L", "module-null-sink",
		// As Debian's default.pa loads it: it loads the module a stream's
		// filter.apply names.
		"-L", "module-filter-apply")
	cmd.Env = []string{"XDG_RUNTIME_DIR=" + dir, "HOME=" + dir, "PATH=/usr/bin:/bin"}
	startServer(t, cmd, sock)
	return sock
}

// desktopApp is a jail app running program with network none and the
// given sockets.
func desktopApp(id string, sockets []string, exe ...string) policy.App {
	yes := true
	return policy.App{
		ID:      id,
		Exec:    exe,
		Sandbox: policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &yes, Sockets: sockets},
		Storage: policy.Storage{Jail: true},
		Env:     map[string]string{"GORACE": os.Getenv("GORACE")},
	}
}

// launchers runs f with each launcher: in-process and through the helper.
func launchers(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, useHelper := range []bool{false, true} {
		name := "fork"
		if useHelper {
			name = "helper"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
			f(t, h)
		})
	}
}

// TestWaylandJailed: a jail app with network none and sockets
// ["wayland"] lists a real compositor's globals and draws a window into
// it for two seconds; without the grant it cannot connect.
func TestWaylandJailed(t *testing.T) {
	info := needProgram(t, "wayland-info")
	shm := needProgram(t, "weston-simple-shm")
	timeout := needProgram(t, "timeout")
	dir := runtimeDir(t)
	w := startWeston(t, dir, "wayland-7")
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=" + w.name, "PATH=/usr/bin:/bin"}
	launchers(t, func(t *testing.T, h *harness) {
		o := h.runApp(desktopApp("wl", []string{"wayland"}, info), env, nil)
		if o.err != nil {
			t.Fatalf("jail did not start: %v", o.err)
		}
		for _, g := range []string{"wl_compositor", "xdg_wm_base", "wl_shm"} {
			if !strings.Contains(o.out, "'"+g+"'") {
				t.Fatalf("granted wayland-info lists no %s:\n%s", g, o.out)
			}
		}
		// What status and the log say the app got.
		if want := []helper.Grant{{Name: "wayland", Path: w.sock, Via: GrantGuard}}; !slices.Equal(o.report.Grants, want) {
			t.Errorf("report grants %+v, want %+v", o.report.Grants, want)
		}
		// The positive control: the same app without the grant, told
		// where the compositor is.
		ungranted := desktopApp("wl", nil, info)
		ungranted.Env["WAYLAND_DISPLAY"] = w.sock
		o = h.runApp(ungranted, env, nil)
		if o.err != nil || strings.Contains(o.out, "wl_compositor") {
			t.Fatalf("without the grant wayland-info reached the compositor (%v):\n%s", o.err, o.out)
		}
		// A window, two seconds long; timeout ends it with SIGTERM.
		before := logSize(t, w.log)
		o = h.runApp(desktopApp("wl", []string{"wayland"}, timeout, "2", shm), env, nil)
		if o.err != nil {
			t.Fatalf("jail did not start: %v", o.err)
		}
		commits, frames := drew(t, w.log, before, "simple-shm")
		t.Logf("jailed weston-simple-shm: %d commits, %d frame callbacks done (weston's protocol log)", commits, frames)
		if commits < 10 || frames < 10 {
			t.Fatalf("jailed weston-simple-shm drew %d frames (%d commits); want at least 10 of each", frames, commits)
		}
	})
}

var protoLine = regexp.MustCompile(`\[proto\] client (0x[0-9a-f]+) (rq|ev) (\S+)`)

// logSize is where weston's log ends now: weston names clients by
// pointer, which a later client may reuse, so drew reads only what
// follows.
func logSize(t testing.TB, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// drew counts, past offset from of weston's log, the surface commits of
// the client that titled its toplevel title, and the frame callbacks the
// compositor answered it: each one a frame it showed.
func drew(t testing.TB, log string, from int, title string) (commits, frames int) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b[from:]), "\n")
	client := ""
	for _, l := range lines {
		if m := protoLine.FindStringSubmatch(l); m != nil && strings.Contains(l, `set_title("`+title+`")`) {
			client = m[1]
			break
		}
	}
	if client == "" {
		t.Fatalf("no client titled %q in weston's log", title)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b[from:])))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	shown := 0
	for sc.Scan() {
		m := protoLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != client {
			continue
		}
		switch {
		case m[2] == "rq" && strings.HasPrefix(m[3], "wl_surface@") && strings.Contains(m[3], ".commit("):
			commits++
		case m[2] == "ev" && strings.HasPrefix(m[3], "wl_callback@") && strings.Contains(m[3], ".done("):
			frames++
			if shown < 3 {
				t.Logf("weston: %s", sc.Text())
				shown++
			}
		}
	}
	return commits, frames
}

// TestDesktopSocketEscapes: an app granted the compositor reaches it and
// no other unix socket: not another pathname socket of the runtime
// directory (stream or datagram), the control socket, the session bus, a
// second compositor, an abstract socket, nor the compositor through a
// link of its own. Each with its positive control, on both launchers.
func TestDesktopSocketEscapes(t *testing.T) {
	dir := runtimeDir(t)
	w := startWeston(t, dir, "wayland-0")
	second := startWeston(t, dir, "wayland-1")
	listen := func(network, p string) string {
		l, err := net.Listen(network, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p
	}
	bus := listen("unix", filepath.Join(dir, "bus"))
	agent := listen("unix", filepath.Join(dir, "agent.sock"))
	abstract := listen("unix", fmt.Sprintf("@octosup-desk-%d", os.Getpid()))
	dgram := filepath.Join(dir, "log.sock")
	dl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close() })
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=wayland-0"}
	launchers(t, func(t *testing.T, h *harness) {
		control := listen("unix", filepath.Join(h.dirs.Runtime, "control.sock"))
		wl := func(a *policy.App) { a.Sandbox.Sockets = []string{"wayland"} }
		wlFull := func(a *policy.App) { wl(a); a.Sandbox.Network = policy.NetworkFull }
		wlTCP := func(a *policy.App) { wl(a); a.Sandbox.Network, a.Sandbox.TCPConnect = policy.NetworkTCP, []uint16{9} }
		// A grant whose server is not there (no sound server runs).
		absent := filepath.Join(dir, "pulse", "native")
		wlBind := func(a *policy.App) {
			a.Sandbox.Sockets = []string{"wayland", "pulseaudio"}
			a.Sandbox.Network, a.Sandbox.TCPConnect, a.Sandbox.TCPBind = policy.NetworkTCP, []uint16{9}, []uint16{40999}
		}
		cases := []escapeCase{
			// A hostile review's: the guard's connect autobinds the app's
			// socket (SO_PASSCRED) and fails; the guard's listen made it
			// a listener any process outside could connect to.
			{name: "listen on a unix socket a granted connect named", attempt: jailed(wlBind, "unix_autobind_listen", absent), refused: []string{"EPERM"},
				control: plain("unix_autobind_listen", absent), allowed: "ok"},
			{name: "the granted compositor", attempt: jailed(asIs, "unix_connect", w.sock), refused: []string{"EPERM"},
				control: jailed(wl, "unix_connect", w.sock), allowed: "ok"},
			{name: "another stream socket in the runtime dir", attempt: jailed(wl, "unix_connect", agent), refused: []string{"EACCES"},
				control: plain("unix_connect", agent), allowed: "ok"},
			{name: "the session bus", attempt: jailed(wlFull, "unix_connect", bus), refused: []string{"EACCES"},
				control: plain("unix_connect", bus), allowed: "ok"},
			{name: "the session bus with network full and no grant", attempt: jailed(withFull, "unix_connect", bus), refused: []string{"EACCES"},
				control: plain("unix_connect", bus), allowed: "ok"},
			// A hostile review's: a netlink connect the guard handed back to
			// the kernel (CONTINUE) was run again on a unix socket swapped
			// onto the same number meanwhile.
			// The control is the bus reached outside the jail: there, the
			// racing connect need not ever find the unix socket in place
			// (as nobody in CI, 3000 tries did not).
			{name: "the session bus through a descriptor swapped under a netlink connect", attempt: jailed(withFull, "connect_swap_race", bus, "3000"), refused: []string{"EACCES", "EPERM"},
				control: plain("unix_connect", bus), allowed: "ok"},
			{name: "a second compositor", attempt: jailed(wlTCP, "unix_connect", second.sock), refused: []string{"EACCES"},
				control: plain("unix_connect", second.sock), allowed: "ok"},
			{name: "the control socket", attempt: jailed(wl, "unix_connect", control), refused: []string{"EACCES"},
				control: plain("unix_connect", control), allowed: "ok"},
			{name: "an abstract socket outside", attempt: jailed(wlFull, "unix_connect", abstract), refused: []string{"EPERM"},
				control: plain("unix_connect", abstract), allowed: "ok"},
			{name: "a datagram socket of its own", attempt: jailed(wlFull, "unix_dgram_socket", dgram), refused: []string{"EPERM"},
				control: plain("unix_dgram_socket", dgram), allowed: "ok"},
			{name: "a datagram pair", attempt: jailed(wl, "dgram_sendto", dgram), refused: []string{"EPERM"},
				control: plain("dgram_sendto", dgram), allowed: "ok"},
			{name: "a datagram pair with network full", attempt: jailed(wlFull, "dgram_sendto", dgram), refused: []string{"EPERM"},
				control: plain("dgram_sendto", dgram), allowed: "ok"},
			{name: "a datagram pair with network full and no grant", attempt: jailed(withFull, "dgram_sendto", dgram), refused: []string{"EPERM"},
				control: plain("dgram_sendto", dgram), allowed: "ok"},
			{name: "sendto on a stream socket", attempt: jailed(wl, "stream_sendto", agent), refused: []string{"ENOTSUP", "ENOTCONN"},
				control: jailed(wl, "unix_connect", w.sock), allowed: "ok"},
			{name: "the compositor through a link of its own", attempt: jailed(wl, "unix_connect_link", w.sock), refused: []string{"EACCES"},
				control: plain("unix_connect_link", w.sock), allowed: "ok"},
			{name: "the runtime dir is the app's own", attempt: jailed(wl, "getenv", "XDG_RUNTIME_DIR"), refused: []string{RuntimeDir(h.dirs, "probe")},
				control: jailed(wl, "getenv", "WAYLAND_DISPLAY"), allowed: w.sock},
		}
		if os.Geteuid() == 0 {
			// The daemon's capabilities are not the app's: a netlink
			// connect is the app's own, not the guard's.
			cases = append(cases, escapeCase{name: "netlink groups through the guard as a root daemon",
				attempt: jailed(wlFull, "netlink_groups"), refused: []string{"EPERM"},
				control: plain("netlink_groups"), allowed: "ok"})
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				runEscapeCase(t, h, c, env)
			})
		}
	})
}

// runEscapeCase runs one case with the daemon's environment env.
func runEscapeCase(t *testing.T, h *harness, c escapeCase, env []string) {
	t.Helper()
	do := func(r run) string {
		if r.plain {
			cmd := exec.Command(h.probe, append([]string{probeArg}, r.args...)...)
			cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("plain probe %v: %v", r.args, err)
			}
			return strings.TrimSpace(string(out))
		}
		app := h.probeApp("probe", r.args...)
		r.mut(&app)
		o := h.runApp(app, env, nil)
		if o.err != nil {
			t.Fatalf("jail did not start: %v", o.err)
		}
		return o.out
	}
	got := do(c.attempt)
	t.Logf("attempt %v: %s", c.attempt.args, got)
	if !slices.Contains(c.refused, got) {
		t.Errorf("attempt %v: got %q, want one of %v", c.attempt.args, got, c.refused)
	}
	if got = do(c.control); got != c.allowed {
		t.Errorf("control %v: got %q, want %q", c.control.args, got, c.allowed)
	}
}

// TestPulseJailed: a jailed pactl info reaches a real PulseAudio with
// sockets ["pulseaudio"], and not without; through the sound filter it
// plays, and it cannot load a module (a module is code the server runs:
// module-ladspa-sink dlopens the path it is given), which the same pactl
// outside the jail can.
func TestPulseJailed(t *testing.T) {
	pactl := needProgram(t, "pactl")
	pacat := needProgram(t, "pacat")
	dir := runtimeDir(t)
	sock := startPulse(t, dir)
	env := []string{"XDG_RUNTIME_DIR=" + dir, "PATH=/usr/bin:/bin"}
	launchers(t, func(t *testing.T, h *harness) {
		o := h.runApp(desktopApp("snd", []string{"pulseaudio"}, pactl, "info"), env, nil)
		if o.err != nil {
			t.Fatalf("jail did not start: %v", o.err)
		}
		if !strings.Contains(o.out, "Server Name: pulseaudio") || !strings.Contains(o.out, "unix:"+sock) {
			t.Fatalf("granted pactl info did not reach the server:\n%s", o.out)
		}
		if want := []helper.Grant{{Name: "pulseaudio", Path: sock, Via: GrantPulseFilter}}; !slices.Equal(o.report.Grants, want) {
			t.Errorf("report grants %+v, want %+v", o.report.Grants, want)
		}
		ungranted := desktopApp("snd", nil, pactl, "info")
		ungranted.Env["PULSE_SERVER"] = "unix:" + sock
		o = h.runApp(ungranted, env, nil)
		if o.err != nil || strings.Contains(o.out, "Server Name") {
			t.Fatalf("without the grant pactl info reached the server (%v):\n%s", o.err, o.out)
		}
		plays(t, h, env, pacat)
		loadsNothing(t, h, env, sock, pactl)
		runsNoPlugin(t, h, env, sock, pacat)
		uploadsNoBigSample(t, h, env, sock, pactl)
	})
	runsNoPlugin(t, nil, env, sock, pacat)
}

// uploadsNoBigSample: a jailed pactl cannot put a sample over the
// filter's 4 MiB in the server's cache (pipewire-pulse 0.3 reads past a
// 4 MiB buffer playing one), and a smaller one goes in; outside the jail
// the big one does too (the control).
func uploadsNoBigSample(t *testing.T, h *harness, env []string, sock, pactl string) {
	t.Helper()
	jail := h.dirs.JailDir("snd")
	if err := os.MkdirAll(jail, 0o700); err != nil {
		t.Fatal(err)
	}
	wav := func(name string, data int) string {
		// A WAV header (44 bytes), then silence: 16-bit stereo, 48 kHz.
		b := []byte("RIFF\x00\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x02\x00\x80\xbb\x00\x00\x00\xee\x02\x00\x04\x00\x10\x00data\x00\x00\x00\x00")
		binary.LittleEndian.PutUint32(b[4:], uint32(36+data))
		binary.LittleEndian.PutUint32(b[40:], uint32(data))
		p := filepath.Join(jail, name)
		if err := os.WriteFile(p, append(b, make([]byte, data)...), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	samples := func() string {
		out, err := exec.Command(pactl, "--server=unix:"+sock, "list", "short", "samples").CombinedOutput()
		if err != nil {
			t.Fatalf("pactl list samples: %v\n%s", err, out)
		}
		return string(out)
	}
	// pactl may send the samples as float32: the small one is under the
	// bound either way, the big one over it.
	small, big := wav("small.wav", pulsefilter.MaxSample/4), wav("big.wav", pulsefilter.MaxSample+1024)
	name := fmt.Sprintf("s%d", time.Now().UnixNano())
	h.runApp(desktopApp("snd", []string{"pulseaudio"}, pactl, "upload-sample", big, name+"_big"), env, nil)
	h.runApp(desktopApp("snd", []string{"pulseaudio"}, pactl, "upload-sample", small, name+"_small"), env, nil)
	if got := samples(); strings.Contains(got, name+"_big") || !strings.Contains(got, name+"_small") {
		t.Fatalf("jailed uploads of a big sample and a small one left the cache with:\n%s", got)
	}
	if out, err := exec.Command(pactl, "--server=unix:"+sock, "upload-sample", big, name+"_control").CombinedOutput(); err != nil || !strings.Contains(samples(), name+"_control") {
		t.Fatalf("control: pactl outside the jail uploaded no big sample (%v): %s", err, out)
	}
}

//go:embed testdata/marker.c
var markerSource []byte

// runsNoPlugin: a stream whose properties ask module-filter-apply for
// module-ladspa-sink with plugin= a shared object of the test's
// (testdata/marker.c) does not have the server run its code through the
// filter (jailed), and does without it (h nil: pacat outside the jail,
// the positive control).
func runsNoPlugin(t *testing.T, h *harness, env []string, sock, pacat string) {
	t.Helper()
	dir := t.TempDir()
	marker, so, src := filepath.Join(dir, "loaded"), filepath.Join(dir, "marker.so"), filepath.Join(dir, "marker.c")
	// Embedded: TestAsNobody runs the test binary elsewhere.
	if err := os.WriteFile(src, markerSource, 0o644); err != nil {
		t.Fatal(err)
	}
	gcc := exec.Command("gcc", "-shared", "-fPIC", "-o", so, `-DMARKER="`+marker+`"`, src)
	if out, err := gcc.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	args := []string{"--playback", "--raw", "--latency-msec=50", "--property=filter.apply=ladspa-sink",
		"--property=filter.apply.ladspa-sink.parameters=plugin=" + so + " label=x", pacat}
	if h != nil {
		o := h.runApp(desktopApp("snd", []string{"pulseaudio"}, append([]string{pacat}, args...)...), env, nil)
		t.Logf("jailed pacat asking for a plugin: %v %s", o.err, o.out)
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the sound server ran a jailed app's plugin: module-filter-apply loaded it through the filter")
		}
		return
	}
	out, err := exec.Command(pacat, append([]string{"--server=unix:" + sock}, args...)...).CombinedOutput()
	if _, serr := os.Stat(marker); serr != nil {
		t.Fatalf("control: the sound server ran no plugin for pacat outside the jail (%v): %s", err, out)
	}
}

// TestSoundConnectionsBounded: each connection through the sound filter
// holds two of the daemon's descriptors, so an app has at most
// maxSoundConns at once; the same connects outside the jail all succeed.
func TestSoundConnectionsBounded(t *testing.T) {
	dir := runtimeDir(t)
	sock := startPulse(t, dir)
	env := []string{"XDG_RUNTIME_DIR=" + dir, "PATH=/usr/bin:/bin"}
	grant := func(a *policy.App) { a.Sandbox.Sockets = []string{"pulseaudio"} }
	n := strconv.Itoa(maxSoundConns)
	launchers(t, func(t *testing.T, h *harness) {
		runEscapeCase(t, h, escapeCase{name: "one more than the bound",
			attempt: jailed(grant, "unix_connect_n", strconv.Itoa(maxSoundConns+1), sock), refused: []string{"EAGAIN"},
			control: jailed(grant, "unix_connect_n", n, sock), allowed: "ok"}, env)
		runEscapeCase(t, h, escapeCase{name: "the same outside the jail",
			attempt: jailed(grant, "unix_connect_n", strconv.Itoa(maxSoundConns+1), sock), refused: []string{"EAGAIN"},
			control: plain("unix_connect_n", strconv.Itoa(maxSoundConns+1), sock), allowed: "ok"}, env)
	})
}

// TestSoundServerHoldingsBounded: a jailed app holds at most
// pulsefilter.MaxStreams streams in its sound server, however it deletes
// (a delete of a channel it was never given frees nothing), and caches at
// most pulsefilter.MaxCache bytes of samples; the same client outside the
// jail makes and caches more (the controls).
func TestSoundServerHoldingsBounded(t *testing.T) {
	dir := runtimeDir(t)
	sock := startPulse(t, dir)
	env := []string{"XDG_RUNTIME_DIR=" + dir, "PATH=/usr/bin:/bin"}
	grant := func(a *policy.App) { a.Sandbox.Sockets = []string{"pulseaudio"} }
	streams := strconv.Itoa(pulsefilter.MaxStreams + 6)
	samples, size := pulsefilter.MaxCache/pulsefilter.MaxSample, strconv.Itoa(pulsefilter.MaxSample)
	launchers(t, func(t *testing.T, h *harness) {
		runEscapeCase(t, h, escapeCase{name: "streams, with deletes of channels never made",
			attempt: jailed(grant, "pulse_streams", streams, sock), refused: cutAt("made", pulsefilter.MaxStreams),
			control: plain("pulse_streams", streams, sock), allowed: "made " + streams}, env)
		runEscapeCase(t, h, escapeCase{name: "samples",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(samples+1), size, sock), refused: cutAt("cached", samples),
			control: plain("pulse_uploads", strconv.Itoa(samples+1), size, sock), allowed: fmt.Sprintf("cached %d", samples+1)}, env)
		// The app removes what it cached, which frees its place;
		// removing a sample's name while its upload is open frees
		// nothing: the finish caches it all the same.
		removeAll := func(n int) {
			app := h.probeApp("probe", "pulse_remove", strconv.Itoa(n), sock)
			grant(&app)
			if o := h.runApp(app, env, nil); o.err != nil || o.out != fmt.Sprintf("removed %d", n) {
				t.Fatalf("a jailed app's removal of its samples: %v %q", o.err, o.out)
			}
		}
		removeAll(samples)
		runEscapeCase(t, h, escapeCase{name: "samples, each name removed before its finish",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(samples+1), size, sock, "remove"), refused: cutAt("cached", samples),
			control: plain("pulse_uploads", strconv.Itoa(samples+1), size, sock, "remove"), allowed: fmt.Sprintf("cached %d", samples+1)}, env)
		// A REMOVE_SAMPLE PulseAudio does not carry out (a value too
		// many: it ends the connection) frees nothing.
		removeAll(samples)
		runEscapeCase(t, h, escapeCase{name: "samples, each then removed with a value too many",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(samples+1), size, sock, "forget"), refused: cutAt("cached", samples),
			control: plain("pulse_uploads", strconv.Itoa(samples+1), size, sock, "forget"), allowed: fmt.Sprintf("cached %d", samples+1)}, env)
		// However small, a sample costs 64 KiB of the bound: 256 at most.
		removeAll(samples)
		tiny := 16 << 20 / (64 << 10)
		runEscapeCase(t, h, escapeCase{name: "tiny samples",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(tiny+44), "4", sock), refused: cutAt("cached", tiny),
			control: plain("pulse_uploads", strconv.Itoa(tiny+44), "4", sock), allowed: fmt.Sprintf("cached %d", tiny+44)}, env)
		removeAll(tiny)
		// Plays: MaxPlays start at once, the next waits out the window
		// (longer than the probe's 3 s for an answer).
		plays := strconv.Itoa(pulsefilter.MaxPlays + 6)
		runEscapeCase(t, h, escapeCase{name: "plays",
			attempt: jailed(grant, "pulse_plays", plays, sock),
			refused: []string{fmt.Sprintf("played %d, then: resource temporarily unavailable", pulsefilter.MaxPlays)},
			control: plain("pulse_plays", plays, sock), allowed: "played " + plays}, env)
	})
}

// cutAt are what a pulse_streams or pulse_uploads probe reports when its
// connection was ended after n.
func cutAt(what string, n int) []string {
	return []string{fmt.Sprintf("%s %d, then: EOF", what, n), fmt.Sprintf("%s %d, then: connection reset by peer", what, n)}
}

// listenBacklog listens on the unix socket path with the given backlog,
// which net.Listen does not take, and returns the listener's fd for the
// caller to close.
func listenBacklog(t testing.TB, path string, backlog int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd
}

// TestSoundServerBacklog: a sound server slow to accept fills its
// listen backlog, and the app's connects wait for room as a blocking
// connect does (the daemon's dial does not wait by itself: EAGAIN, which
// CI met on a loaded machine).
func TestSoundServerBacklog(t *testing.T) {
	dir := runtimeDir(t)
	sock := filepath.Join(dir, "slow")
	f := os.NewFile(uintptr(listenBacklog(t, sock, 0)), "slow")
	ln, err := net.FileListener(f) // a copy of f's fd
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A slow server: one accept every 50 ms, the connections held.
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	env := []string{"XDG_RUNTIME_DIR=" + dir, "PULSE_SERVER=unix:" + sock, "PATH=/usr/bin:/bin"}
	grant := func(a *policy.App) { a.Sandbox.Sockets = []string{"pulseaudio"} }
	launchers(t, func(t *testing.T, h *harness) {
		app := h.probeApp("snd", "unix_connect_n", "6", sock)
		grant(&app)
		if o := h.runApp(app, env, nil); o.err != nil || o.out != "ok" {
			t.Fatalf("6 connects to a slow server: %v %q, want ok", o.err, o.out)
		}
	})
}

// plays: through the filter a jailed pacat plays its own binary, as raw
// samples (about a second), to the end. (A PipeWire with no session
// manager, as the tests run it, links no stream: pacat outside the jail
// times out there too.)
func plays(t *testing.T, h *harness, env []string, pacat string) {
	t.Helper()
	// sh says how its one command exited: the harness reads stdout.
	o := h.runApp(desktopApp("snd", []string{"pulseaudio"}, "/bin/sh", "-c", `"$0" --playback --raw --latency-msec=50 "$0"; echo "exit $?"`, pacat), env, nil)
	if o.err != nil || o.out != "exit 0" {
		t.Fatalf("a jailed pacat did not play to the end (%v): %s", o.err, o.out)
	}
}

// loadsNothing: through the filter a jailed pactl load-module loads
// nothing into the server at sock, while the same pactl outside the jail
// does (the positive control).
func loadsNothing(t *testing.T, h *harness, env []string, sock, pactl string) {
	t.Helper()
	sinks := func() []string {
		out, err := exec.Command(pactl, "--server=unix:"+sock, "list", "short", "sinks").CombinedOutput()
		if err != nil {
			t.Fatalf("pactl list sinks: %v\n%s", err, out)
		}
		var names []string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				names = append(names, f[1])
			}
		}
		return names
	}
	name := fmt.Sprintf("jailed_%d", time.Now().UnixNano())
	o := h.runApp(desktopApp("snd", []string{"pulseaudio"}, "/bin/sh", "-c", `"$0" load-module module-null-sink sink_name="$1"; echo "exit $?"`, pactl, name), env, nil)
	t.Logf("jailed load-module: %s", o.out)
	if o.out == "exit 0" || slices.Contains(sinks(), name) {
		t.Fatalf("a jailed pactl loaded a module (%s): sinks %q", o.out, sinks())
	}
	control := exec.Command(pactl, "--server=unix:"+sock, "load-module", "module-null-sink", "sink_name=control_"+name)
	if out, err := control.CombinedOutput(); err != nil || !slices.Contains(sinks(), "control_"+name) {
		t.Fatalf("control: pactl outside the jail loaded no module (%v): %s; sinks %q", err, out, sinks())
	}
}

// TestPipeWireJailed: pipewire-pulse serves the PulseAudio protocol to a
// jailed pactl through the sound filter as PulseAudio does, and the
// filter refuses it modules the same way (pipewire-pulse maps
// module-ladspa-sink onto a filter-chain that loads the plugin). PipeWire's own socket is no
// grant: a client of it can have the server load a plugin from any path
// (spa-node-factory's library.name climbs out of the plugin directory).
func TestPipeWireJailed(t *testing.T) {
	pw := needProgram(t, "pipewire")
	pwPulse := needProgram(t, "pipewire-pulse")
	pactl := needProgram(t, "pactl")
	pacat := needProgram(t, "pacat")
	dir := runtimeDir(t)
	senv := []string{"XDG_RUNTIME_DIR=" + dir, "HOME=" + dir, "PATH=/usr/bin:/bin", "PIPEWIRE_RUNTIME_DIR=" + dir, "DBUS_SESSION_BUS_ADDRESS=disabled:"}
	cmd := exec.Command(pw)
	cmd.Env = senv
	startServer(t, cmd, filepath.Join(dir, "pipewire-0"))
	if err := os.Mkdir(filepath.Join(dir, "pulse"), 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "pulse", "native")
	startPulse := func() {
		cmd := exec.Command(pwPulse)
		cmd.Env = senv
		startServer(t, cmd, sock)
	}
	startPulse()
	alive := func() error {
		out, err := exec.Command(pactl, "--server=unix:"+sock, "info").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	// Streams pipewire-pulse 0.3 (Debian 12's) does not survive: a
	// property it reads as a pointer, a format's channel map past its
	// 64-entry array, buffer attributes before the stream has a rate.
	crashers := []struct {
		name string
		app  policy.App
		args []string // the same, as a plain probe outside the jail
	}{
		{"adapt.follower.node", desktopApp("snd", []string{"pulseaudio"}, "/usr/bin/timeout", "2", pacat, "--playback", "--raw", "--property=adapt.follower.node=pointer:0x4141414141", "/dev/zero"), nil},
		{"a channel map of 250", policy.App{}, []string{"pulse_raw", "chmap", "250", sock}},
		{"buffer attributes at rate 0", policy.App{}, []string{"pulse_raw", "battr", "2", sock}},
	}
	env := []string{"XDG_RUNTIME_DIR=" + dir, "PATH=/usr/bin:/bin"}
	launchers(t, func(t *testing.T, h *harness) {
		o := h.runApp(desktopApp("snd", []string{"pulseaudio"}, pactl, "info"), env, nil)
		if o.err != nil || !strings.Contains(o.out, "PulseAudio (on PipeWire") {
			t.Fatalf("granted pactl info did not reach pipewire-pulse (%v):\n%s", o.err, o.out)
		}
		loadsNothing(t, h, env, sock, pactl)
		// The sample cache's bound, as against PulseAudio
		// (TestSoundServerHoldingsBounded); streams are not tried here:
		// with no session manager to link them, pipewire-pulse answers
		// no create.
		samples, size := pulsefilter.MaxCache/pulsefilter.MaxSample, strconv.Itoa(pulsefilter.MaxSample)
		grant := func(a *policy.App) { a.Sandbox.Sockets = []string{"pulseaudio"} }
		runEscapeCase(t, h, escapeCase{name: "samples",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(samples+1), size, sock),
			refused: cutAt("cached", samples),
			control: plain("pulse_uploads", strconv.Itoa(samples+1), size, sock), allowed: fmt.Sprintf("cached %d", samples+1)}, env)
		// pipewire-pulse names a sample by the client's properties under
		// the upload's: an event.id set on the client, and an upload
		// named "decoy" with none, would cache samples the filter
		// counted as one. The filter keeps the client's properties from
		// naming samples, so the jailed finish names none.
		app := h.probeApp("probe", "pulse_remove", strconv.Itoa(samples), sock)
		grant(&app)
		if o := h.runApp(app, env, nil); o.err != nil || o.out != fmt.Sprintf("removed %d", samples) {
			t.Fatalf("a jailed app's removal of its samples: %v %q", o.err, o.out)
		}
		runEscapeCase(t, h, escapeCase{name: "samples named by the client's event.id",
			attempt: jailed(grant, "pulse_uploads", strconv.Itoa(samples+1), size, sock, "alias"),
			refused: []string{"cached 0, then: the server refused tag 4"},
			control: plain("pulse_uploads", strconv.Itoa(samples+1), size, sock, "alias"), allowed: fmt.Sprintf("cached %d", samples+1)}, env)
		if o := h.runApp(desktopApp("snd", []string{"pipewire"}, pactl, "info"), env, nil); o.err == nil || !strings.Contains(o.err.Error(), `"pipewire" is not a socket octosup grants`) {
			t.Fatalf("an app with sockets [\"pipewire\"] started (%v)", o.err)
		}
		for _, c := range crashers {
			app := c.app
			if c.args != nil {
				app = h.probeApp("snd", c.args...)
				app.Sandbox.Sockets = []string{"pulseaudio"}
			}
			o := h.runApp(app, env, nil)
			t.Logf("jailed %s: %v %s", c.name, o.err, o.out)
			if err := alive(); err != nil {
				t.Fatalf("pipewire-pulse is gone after a jailed app's %s: %v", c.name, err)
			}
		}
	})
	// The controls, last: outside the jail each takes the server down
	// (a new one for the next).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crashers {
		cmd := exec.Command("/usr/bin/timeout", "2", pacat, "--server=unix:"+sock, "--playback", "--raw", "--property=adapt.follower.node=pointer:0x4141414141", "/dev/zero")
		if c.args != nil {
			cmd = exec.Command(exe, append([]string{probeArg}, c.args...)...)
		}
		cmd.Run()
		if alive() == nil {
			t.Fatalf("control: pipewire-pulse outlived %s outside the jail", c.name)
		}
		startPulse()
	}
}

// TestConnectRace: a thread that rewrites the address while the guard
// decides never connects elsewhere. The probe connects thousands of times
// to one buffer that another thread flips between the granted socket and
// a forbidden one; the forbidden one must have nothing in its backlog.
// The positive control, unjailed, does reach it.
func TestConnectRace(t *testing.T) {
	dir := runtimeDir(t)
	good := filepath.Join(dir, "wayland-0")
	bad := filepath.Join(dir, "wayland-X") // as long as good: the flip tears no word
	// count runs f against two listeners nobody accepts on, then counts
	// what each holds.
	count := func(f func() string) (out string, goodN, badN int) {
		listen := func(p string) int {
			os.Remove(p)
			return listenBacklog(t, p, 4096)
		}
		drain := func(fd int) (n int) {
			defer unix.Close(fd)
			for {
				c, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				if err != nil {
					return n
				}
				unix.Close(c)
				n++
			}
		}
		gfd, bfd := listen(good), listen(bad)
		unix.SetNonblock(gfd, true)
		unix.SetNonblock(bfd, true)
		out = f()
		return out, drain(gfd), drain(bfd)
	}
	h := newHarness(t)
	// The flipping thread has to run between a connect's copy of the
	// address and its use: on a loaded machine it may not in one round,
	// so the control gets a few before it says the race does not flip.
	var out string
	badN := 0
	for round := 0; round < 5 && badN == 0; round++ {
		out, _, badN = count(func() string { return h.runPlain("connect_race", good, bad, "2000") })
		t.Logf("unjailed, round %d: %s; %d reached the other socket", round+1, out, badN)
	}
	if badN == 0 {
		t.Fatalf("the control never reached the other socket in 5 rounds (%s): the race does not flip the address", out)
	}
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=wayland-0"}
	launchers(t, func(t *testing.T, h *harness) {
		out, goodN, badN := count(func() string {
			o := h.runApp(desktopApp("race", []string{"wayland"}, h.probe, probeArg, "connect_race", good, bad, "2000"), env, nil)
			if o.err != nil {
				t.Fatalf("jail did not start: %v", o.err)
			}
			return o.out
		})
		t.Logf("jailed: %s; %d reached the granted socket, %d the other", out, goodN, badN)
		if badN != 0 || goodN == 0 {
			t.Fatalf("jailed race: %d connects reached the forbidden socket, %d the granted one", badN, goodN)
		}
	})
}

// TestSignalledConnect: a signal that interrupts an app's connect while
// the daemon makes it must not make the app see the connect fail. Without
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV the kernel withdraws the
// notification and restarts the call: the daemon, which had connected the
// socket already, is asked again and the app gets EISCONN for a connect
// that took. Go apps meet this by themselves (the runtime preempts with
// SIGURG); the probe sends SIGURG without pause to make it certain.
func TestSignalledConnect(t *testing.T) {
	dir := runtimeDir(t)
	sock := filepath.Join(dir, "wayland-0")
	acceptAll(t, sock)
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=wayland-0"}
	wl := func(a *policy.App) { a.Sandbox.Sockets = []string{"wayland"} }
	launchers(t, func(t *testing.T, h *harness) {
		if got := h.runPlain("connect_signalled", sock, "2000"); got != "ok" {
			t.Fatalf("unjailed: %s", got)
		}
		app := h.probeApp("probe", "connect_signalled", sock, "2000")
		wl(&app)
		o := h.runApp(app, env, nil)
		if o.err != nil {
			t.Fatalf("jail did not start: %v", o.err)
		}
		if o.out != "ok" {
			t.Errorf("jailed, 2000 connects under signals: %s", o.out)
		}
	})
}

// acceptAll listens on the unix socket path and accepts and closes every
// connection until the test ends, which waits for its goroutine.
func acceptAll(t testing.TB, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-accepted })
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// TestStalledConnectsAreBounded: a granted socket whose listener never
// accepts (a stalled compositor) holds at most maxConnects of the app's
// connects in the daemon, across its restarts; past them a connect is
// EAGAIN at once, never made on the guard's own goroutine, so the guard
// (and the daemon's shutdown, which waits for it) goes on.
func TestStalledConnectsAreBounded(t *testing.T) {
	dir := runtimeDir(t)
	launchers(t, func(t *testing.T, h *harness) {
		// A listener of each launcher's own, with backlog 0: one connect
		// is queued, every later one blocks. Closed at the end, which
		// ends the connects the daemon still makes.
		name := "wayland-" + filepath.Base(t.Name())
		sock := filepath.Join(dir, name)
		fd := listenBacklog(t, sock, 0)
		t.Cleanup(func() { unix.Close(fd) })
		env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=" + name}
		run := func(n, want int) string {
			app := h.probeApp("stall", "connect_stall", sock, fmt.Sprint(n), fmt.Sprint(want))
			app.Sandbox.Sockets = []string{"wayland"}
			o := h.runApp(app, env, nil)
			if o.err != nil {
				t.Fatalf("jail did not start: %v", o.err)
			}
			return o.out
		}
		// 40 connects: the queued one, maxConnects blocked in the
		// daemon, the rest EAGAIN.
		if got, want := run(40, 40-maxConnects), fmt.Sprintf("ok=1 failed=map[EAGAIN:%d]", 40-maxConnects-1); got != want {
			t.Fatalf("first run: %s, want %s", got, want)
		}
		// The app again: its slots are still held by the connects that
		// outlived it, so every connect is EAGAIN at once.
		if got, want := run(8, 8), "ok=0 failed=map[EAGAIN:8]"; got != want {
			t.Fatalf("after a restart: %s, want %s", got, want)
		}
	})
}

// TestLingeringCloseHoldsNoGuard: the daemon's copy of an app's socket
// (taken for a connect, a bind or an inotify_add_watch the guard
// decides) is the last one when the app closes its own meanwhile, and
// closing a TCP socket with unsent data and SO_LINGER set waits out the
// linger: that close is never made on the guard's own goroutine, so the
// guard goes on answering (the refused call itself is answered once the
// close is done, and past 16 such closes the app's calls wait, then are
// EAGAIN). Before, a refused connect, bind or watch closed the copy in
// line, and the app's chosen linger held the guard and the daemon's
// shutdown.
func TestLingeringCloseHoldsNoGuard(t *testing.T) {
	dir := runtimeDir(t)
	sock := filepath.Join(dir, "wayland-linger")
	acceptAll(t, sock)
	// A peer that accepts and never reads, with a small window.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=wayland-linger"}
	for _, op := range []string{"connect", "bind", "inotify"} {
		t.Run(op, func(t *testing.T) {
			launchers(t, func(t *testing.T, h *harness) {
				app := h.probeApp("linger", "linger_race", op, fmt.Sprint(port), "1", sock, "150")
				app.Sandbox.Network = policy.NetworkTCP
				app.Sandbox.TCPConnect = []uint16{uint16(port)}
				app.Sandbox.TCPBind = []uint16{uint16(port) + 1}
				app.Sandbox.Sockets = []string{"wayland"}
				o := h.runApp(app, env, nil)
				if o.err != nil {
					t.Fatalf("jail did not start: %v", o.err)
				}
				if !strings.HasPrefix(o.out, "held, lingered ") {
					t.Fatalf("the app's lingering sockets: %s", o.out)
				}
				t.Logf("the app: %s", o.out)
			})
		})
	}
}

// TestConnectFloodIsThrottled: connects the guard decides spend from its
// budget like every other call it answers (budget.go): an app that
// connects in a loop from four threads is throttled, and the daemon says
// so. The connects, answered on goroutines of their own, spent nothing.
func TestConnectFloodIsThrottled(t *testing.T) {
	dir := runtimeDir(t)
	env := []string{"XDG_RUNTIME_DIR=" + dir, "WAYLAND_DISPLAY=wayland-0"}
	core, logged := observer.New(zap.InfoLevel)
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, Log: zap.New(core)})
	app := h.probeApp("flood", "connect_flood", filepath.Join(dir, "not-granted"), "4", "2000")
	app.Sandbox.Sockets = []string{"wayland"}
	o := h.runApp(app, env, nil)
	if o.err != nil {
		t.Fatalf("jail did not start: %v", o.err)
	}
	t.Logf("the app: %s", o.out)
	if logged.FilterMessageSnippet("guard throttled").Len() == 0 {
		t.Fatalf("2 s of connects from 4 threads (%s) were never throttled", o.out)
	}
}
