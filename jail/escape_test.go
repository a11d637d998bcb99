package jail

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// world is what the escape cases aim at: the daemon (this test process),
// the user's home, another app's jail, a loopback listener, the control
// socket, an abstract socket, a terminal.
type world struct {
	daemon        int
	homeFile      string
	script        string // a program that is a #! script running the probe
	otherJailFile string
	outsideDir    string
	outsideFile   string
	resourceDir   string
	resourceFile  string
	roExternal    string
	rwExternal    string
	tcpPort       int // a listener
	freePort      int // nothing listens; bind target
	controlSocket string
	abstract      string
	vmAddr        string // an address in the daemon's memory
	pty           *os.File
}

func newWorld(t *testing.T, h *harness) *world {
	t.Helper()
	w := &world{daemon: os.Getpid()}
	write := func(p, content string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := filepath.Dir(h.dirs.Home)
	w.homeFile = write(filepath.Join(h.dirs.Home, ".ssh", "id_ed25519"), "secret key")
	write(filepath.Join(h.dirs.SecretsDir("other"), "token"), "other app's secret")
	w.script = write(filepath.Join(base, "bin", "probe.sh"), "#!/bin/sh\nexec "+h.probe+" "+probeArg+" \"$@\"\n")
	if err := os.Chmod(w.script, 0o755); err != nil {
		t.Fatal(err)
	}
	w.otherJailFile = write(filepath.Join(h.dirs.JailDir("other"), "notes.db"), "other app's data")
	w.outsideDir = filepath.Join(base, "outside")
	w.outsideFile = write(filepath.Join(w.outsideDir, "file"), "outside")
	w.resourceDir = filepath.Join(base, "share", "probe")
	w.resourceFile = write(filepath.Join(w.resourceDir, "data.txt"), "resource")
	w.roExternal = write(filepath.Join(h.dirs.Home, "Documents", "ro", "doc.txt"), "read me")
	w.rwExternal = filepath.Join(h.dirs.Home, "Documents", "rw")
	if err := os.MkdirAll(w.rwExternal, 0o755); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	w.tcpPort = ln.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.freePort = free.Addr().(*net.TCPAddr).Port
	free.Close()

	w.controlSocket = filepath.Join(h.dirs.Runtime, "control.sock")
	cl, err := net.Listen("unix", w.controlSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w.abstract = fmt.Sprintf("@octosup-test-%d", os.Getpid())
	al, err := net.Listen("unix", w.abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	// Nobody accepts: connects complete against the backlog.

	target := make([]byte, 64)
	w.vmAddr = fmt.Sprintf("%#x", uintptr(unsafe.Pointer(&target[0])))
	t.Cleanup(func() { runtime.KeepAlive(target) })

	w.pty = openPty(t)
	return w
}

// openPty returns a pty's follower end.
func openPty(t *testing.T) *os.File {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	master := os.NewFile(uintptr(m), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// run says how a probe ran: jailed as app (after mut), or plain.
type run struct {
	plain bool
	mut   func(a *policy.App)
	args  []string
	pty   bool // send the pty down the hub
}

func jailed(mut func(a *policy.App), args ...string) run { return run{mut: mut, args: args} }
func plain(args ...string) run                           { return run{plain: true, args: args} }

// App variants.
func asIs(*policy.App) {}
func withProcesses(a *policy.App) {
	yes := true
	a.Sandbox.Processes = &yes
}
func withTCP(connect, bind []uint16) func(a *policy.App) {
	return func(a *policy.App) {
		a.Sandbox.Network = policy.NetworkTCP
		a.Sandbox.TCPConnect, a.Sandbox.TCPBind = connect, bind
	}
}

// viaScript runs the probe through world.script, which execs it: the
// probe binary becomes a resource, which processes: true may execute.
func viaScript(script, probe string) func(a *policy.App) {
	return func(a *policy.App) {
		withProcesses(a)
		a.Exec = append([]string{script}, a.Exec[2:]...)
		a.Resources = append(a.Resources, probe)
	}
}
func withFull(a *policy.App)  { a.Sandbox.Network = policy.NetworkFull }
func withBroad(a *policy.App) { a.Sandbox.Policy = policy.PolicyBroad }

// escapeCase is one rule: the jailed attempt and what it must get, next
// to a positive control showing the same action succeeds where allowed.
type escapeCase struct {
	name    string
	attempt run
	refused []string // acceptable outcomes of the attempt
	control run
	allowed string // the control's outcome; "!EPERM": anything but EPERM
	// privileged controls need root outside the jail (mount, bpf, TIOCSTI).
	privileged bool
}

func (h *harness) do(t *testing.T, w *world, id string, r run) string {
	t.Helper()
	if r.plain {
		if r.pty {
			t.Fatal("pty needs a jailed run")
		}
		return h.runPlain(r.args...)
	}
	app := h.probeApp(id, r.args...)
	app.Resources = []string{w.resourceDir}
	app.Sandbox.External = []policy.External{
		{Path: "~/Documents/ro", Access: policy.AccessRO},
		{Path: "~/Documents/rw", Access: policy.AccessRW},
	}
	r.mut(&app)
	var fd *os.File
	if r.pty {
		fd = w.pty
	}
	o := h.runApp(app, nil, fd)
	if o.err != nil {
		t.Fatalf("jail did not start: %v", o.err)
	}
	if want := !h.l.cfg.UseHelper; o.forked != want {
		t.Fatalf("spawned in-process %v, want %v", o.forked, want)
	}
	if !slices.Contains(o.report.Layers, "seccomp") || (app.Sandbox.Policy == policy.PolicyJail && !slices.Contains(o.report.Layers, "landlock")) {
		t.Fatalf("layers %v missing %v: the kernel here has both", o.report.Layers, o.report.Missing)
	}
	return o.out
}

func escapeCases(h *harness, w *world) []escapeCase {
	jail := h.dirs.JailDir("probe")
	d := strconv.Itoa(w.daemon)
	tcp := uint16(w.tcpPort)
	free := uint16(w.freePort)
	pty := func(r run) run { r.pty = true; return r }
	script := viaScript(w.script, h.probe)
	return []escapeCase{
		{name: "read home", attempt: jailed(asIs, "read", w.homeFile), refused: []string{"EACCES"},
			control: jailed(withBroad, "read", w.homeFile), allowed: "ok"},
		{name: "read another app's jail", attempt: jailed(asIs, "read", w.otherJailFile), refused: []string{"EACCES"},
			control: plain("read", w.otherJailFile), allowed: "ok"},
		{name: "write outside the jail", attempt: jailed(asIs, "write", filepath.Join(w.outsideDir, "new")), refused: []string{"EACCES"},
			control: jailed(asIs, "write", filepath.Join(jail, "new")), allowed: "ok"},
		// A running ELF is ETXTBSY to writers before any LSM looks, so the
		// program here is a script (which also exercises #! detection).
		{name: "write the program", attempt: jailed(script, "write", w.script), refused: []string{"EACCES"},
			control: plain("write", w.script), allowed: "ok"},
		{name: "replace the program", attempt: jailed(script, "replace", filepath.Join(jail, "new"), w.script), refused: []string{"EACCES", "EXDEV"},
			control: jailed(script, "replace", filepath.Join(jail, "new"), filepath.Join(jail, "new2")), allowed: "ok"},
		{name: "write /etc", attempt: jailed(asIs, "write", "/etc/octosup-escape"), refused: []string{"EACCES"},
			control: jailed(asIs, "read", "/etc/passwd"), allowed: "ok"},
		{name: "write a ro external", attempt: jailed(asIs, "write", w.roExternal), refused: []string{"EACCES"},
			control: jailed(asIs, "read", w.roExternal), allowed: "ok"},
		{name: "write the secrets dir", attempt: jailed(asIs, "write", filepath.Join(h.dirs.SecretsDir("other"), "x")), refused: []string{"EACCES"},
			control: jailed(asIs, "write", filepath.Join(h.dirs.SecretsDir("probe"), "token")), allowed: "ok"},
		{name: "rw external", attempt: jailed(asIs, "write", filepath.Join(filepath.Dir(w.rwExternal), "sibling")), refused: []string{"EACCES"},
			control: jailed(asIs, "write", filepath.Join(w.rwExternal, "out.txt")), allowed: "ok"},
		{name: "truncate a read-only file", attempt: jailed(asIs, "truncate", w.resourceFile), refused: []string{"EACCES"},
			control: jailed(asIs, "read", w.resourceFile), allowed: "ok"},
		{name: "O_TRUNC a read-only file", attempt: jailed(asIs, "open_trunc", w.resourceFile), refused: []string{"EACCES"},
			control: jailed(asIs, "open_trunc", "/dev/null"), allowed: "ok"},
		{name: "hard link an outside file into the jail", attempt: jailed(asIs, "link", w.outsideFile, filepath.Join(jail, "link")), refused: []string{"EACCES", "EXDEV"},
			control: plain("link", w.outsideFile, filepath.Join(w.outsideDir, "link")), allowed: "ok"},
		{name: "rename an outside file into the jail", attempt: jailed(asIs, "rename", w.outsideFile, filepath.Join(jail, "moved")), refused: []string{"EACCES", "EXDEV"},
			control: jailed(asIs, "write", filepath.Join(jail, "moved")), allowed: "ok"},
		{name: "chmod a file outside", attempt: jailed(asIs, "chmod", w.homeFile), refused: []string{"EPERM"},
			control: plain("chmod", w.homeFile), allowed: "ok"},
		{name: "chmod in the jail", attempt: jailed(asIs, "chmod", filepath.Join(jail, "new")), refused: []string{"EPERM"},
			control: jailed(asIs, "write", filepath.Join(jail, "new")), allowed: "ok"},
		{name: "exec /bin/sh with processes false", attempt: jailed(asIs, "exec", "/bin/sh", "sh", "-c", "echo ok"), refused: []string{"EACCES", "EPERM"},
			control: jailed(withProcesses, "exec", "/bin/sh", "sh", "-c", "echo ok"), allowed: "ok"},
		{name: "fork", attempt: jailed(asIs, "fork"), refused: []string{"EPERM"},
			control: jailed(withProcesses, "fork"), allowed: "ok"},
		{name: "clone a process", attempt: jailed(asIs, "clone_process"), refused: []string{"EPERM"},
			control: jailed(asIs, "threads"), allowed: "ok"},
		{name: "clone3", attempt: jailed(withProcesses, "clone3"), refused: []string{"ENOSYS"},
			control: plain("clone3"), allowed: "ok"},
		{name: "tcp connect with network none", attempt: jailed(asIs, "tcp_connect", strconv.Itoa(w.tcpPort)), refused: []string{"EPERM"},
			control: jailed(withTCP([]uint16{tcp}, nil), "tcp_connect", strconv.Itoa(w.tcpPort)), allowed: "ok"},
		{name: "tcp connect to a port not granted", attempt: jailed(withTCP([]uint16{tcp + 1}, nil), "tcp_connect", strconv.Itoa(w.tcpPort)), refused: []string{"EACCES"},
			control: jailed(withTCP([]uint16{tcp}, nil), "tcp_connect", strconv.Itoa(w.tcpPort)), allowed: "ok"},
		{name: "tcp bind a port not granted", attempt: jailed(withTCP(nil, nil), "tcp_bind", strconv.Itoa(w.freePort)), refused: []string{"EACCES", "EPERM"},
			control: jailed(withTCP(nil, []uint16{free}), "tcp_bind", strconv.Itoa(w.freePort)), allowed: "ok"},
		{name: "udp with network none", attempt: jailed(asIs, "udp"), refused: []string{"EPERM"},
			control: plain("udp"), allowed: "ok"},
		{name: "udp with network tcp", attempt: jailed(withTCP([]uint16{53}, nil), "udp"), refused: []string{"EPERM"},
			control: jailed(withFull, "udp"), allowed: "ok"},
		{name: "mptcp with network tcp", attempt: jailed(withTCP([]uint16{tcp}, nil), "mptcp"), refused: []string{"EPERM"},
			control: plain("mptcp"), allowed: "!EPERM"},
		{name: "vsock with network tcp", attempt: jailed(withTCP([]uint16{tcp}, nil), "vsock"), refused: []string{"EPERM"},
			control: plain("vsock"), allowed: "!EPERM"},
		{name: "netlink with network tcp", attempt: jailed(withTCP([]uint16{tcp}, nil), "netlink"), refused: []string{"EPERM"},
			control: plain("netlink"), allowed: "ok"},
		{name: "connect to the control socket", attempt: jailed(asIs, "unix_connect", w.controlSocket), refused: []string{"EPERM"},
			control: plain("unix_connect", w.controlSocket), allowed: "ok"},
		{name: "socketpair with network none", attempt: jailed(asIs, "socketpair"), refused: []string{"ok"},
			control: plain("socketpair"), allowed: "ok"},
		{name: "connect to an abstract socket outside", attempt: jailed(withFull, "unix_connect", w.abstract), refused: []string{"EPERM"},
			control: plain("unix_connect", w.abstract), allowed: "ok"},
		{name: "signal the daemon", attempt: jailed(asIs, "kill", d), refused: []string{"EPERM"},
			control: plain("kill", d), allowed: "ok"},
		{name: "ptrace the daemon", attempt: jailed(asIs, "ptrace_attach", d), refused: []string{"EPERM"},
			control: plain("ptrace_seize", d), allowed: "ok"},
		{name: "process_vm_readv the daemon", attempt: jailed(asIs, "vm_readv", d, w.vmAddr), refused: []string{"EPERM"},
			control: plain("vm_readv", d, w.vmAddr), allowed: "ok"},
		{name: "read the daemon's environ", attempt: jailed(asIs, "read", "/proc/"+d+"/environ"), refused: []string{"EACCES"},
			control: plain("read", "/proc/"+d+"/environ"), allowed: "ok"},
		{name: "open the daemon's mem", attempt: jailed(asIs, "open", "/proc/"+d+"/mem"), refused: []string{"EACCES"},
			control: plain("open", "/proc/"+d+"/mem"), allowed: "ok"},
		{name: "own /proc entry", attempt: jailed(asIs, "read", "/proc/1/cmdline"), refused: []string{"EACCES"},
			control: jailed(asIs, "read", "/proc/self/cmdline"), allowed: "ok"},
		{name: "bpf", attempt: jailed(asIs, "bpf"), refused: []string{"EPERM"},
			control: plain("bpf"), allowed: "ok", privileged: true},
		{name: "userfaultfd", attempt: jailed(asIs, "userfaultfd"), refused: []string{"EPERM"},
			control: plain("userfaultfd"), allowed: "ok"},
		{name: "unshare a user namespace", attempt: jailed(withProcesses, "unshare_user"), refused: []string{"EPERM"},
			control: plain("unshare_user"), allowed: "!EPERM"},
		{name: "mount", attempt: jailed(asIs, "mount", jail), refused: []string{"EPERM"},
			control: plain("mount", w.outsideDir), allowed: "ok", privileged: true},
		{name: "keyctl", attempt: jailed(asIs, "keyctl"), refused: []string{"EPERM"},
			control: plain("keyctl"), allowed: "ok"},
		{name: "io_uring_setup", attempt: jailed(asIs, "io_uring"), refused: []string{"EPERM"},
			control: plain("io_uring"), allowed: "ok"},
		{name: "perf_event_open", attempt: jailed(asIs, "perf"), refused: []string{"EPERM"},
			control: plain("perf"), allowed: "ok"},
		{name: "TIOCSTI", attempt: pty(jailed(asIs, "tiocsti")), refused: []string{"EPERM"},
			control: pty(jailed(asIs, "tiocgwinsz")), allowed: "ok"},
		{name: "personality", attempt: jailed(asIs, "personality", "0x0040000"), refused: []string{"EPERM"},
			control: jailed(asIs, "personality", "0xffffffff"), allowed: "ok"},
		{name: "broad keeps the filter", attempt: jailed(withBroad, "keyctl"), refused: []string{"EPERM"},
			control: jailed(withBroad, "write", filepath.Join(w.outsideDir, "broad")), allowed: "ok"},
	}
}

// TestEscape runs every rule of the jail against a real jailed child (the
// probe), next to its positive control. "The daemon" is this process.
// It runs twice: spawned in-process (the default) and through the
// helper (Config.UseHelper).
func TestEscape(t *testing.T) {
	t.Run("fork", func(t *testing.T) { testEscape(t, false) })
	t.Run("helper", func(t *testing.T) { testEscape(t, true) })
}

func testEscape(t *testing.T, useHelper bool) {
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
	w := newWorld(t, h)
	hw := newHostileWorld(t, h)
	root := os.Geteuid() == 0
	for _, c := range append(escapeCases(h, w), hostileCases(h, w, hw)...) {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			got := h.do(t, w, "probe", c.attempt)
			t.Logf("attempt %v: %s", c.attempt.args, got)
			if !slices.Contains(c.refused, got) {
				t.Errorf("attempt %v: got %q, want one of %v", c.attempt.args, got, c.refused)
			}
			if c.privileged && !root {
				t.Logf("control %v needs root outside the jail; not run", c.control.args)
				return
			}
			got = h.do(t, w, "probe", c.control)
			if c.allowed == "!EPERM" && got != "EPERM" || got == c.allowed {
				return
			}
			t.Errorf("control %v: got %q, want %q", c.control.args, got, c.allowed)
		})
	}
}
