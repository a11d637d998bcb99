package systemd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"octosup/policy"
)

// installCase is one way of running make install, and where it puts things.
type installCase struct {
	name string
	// vars are make's command-line variables.
	vars []string
	// dest is DESTDIR ("" for none); prefix what the installed files name.
	dest, prefix string
}

// TestInstall runs make install as the README says (the default prefix,
// ~/.local) and as a package would (PREFIX=/usr, DESTDIR), and checks
// that every file the units and the example manifest name is installed,
// executable where it is run; then make uninstall, which must leave none
// of it. The default install is then followed to the end the README
// promises: the example manifest copied to ~/.config/octosup validates
// without a warning, and the daemon the service's ExecStart runs starts
// both demo apps.
func TestInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	dest := filepath.Join(tmp, "dest")
	// A build of its own: bin/ of the checkout may be in use by other
	// tests, and must not be rebuilt under them.
	bin := filepath.Join(tmp, "bin")
	mk := makeRunner(t, root, home, bin)
	stale := filepath.Join(home, ".config/systemd/user")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "octosupd.service"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, c := range []installCase{
		{name: "user", prefix: filepath.Join(home, ".local")},
		{name: "package", vars: []string{"PREFIX=/usr", "DESTDIR=" + dest}, dest: dest, prefix: "/usr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := mk(t, append([]string{"install"}, c.vars...)...)
			// A unit of an older install (the user case's home has one)
			// would hide the new ones: make install says so, and only
			// for an install into this home.
			if noted := strings.Contains(out, "note: "+stale); noted != (c.dest == "") {
				t.Errorf("make install noted %s: %v, want %v:\n%s", stale, noted, c.dest == "", out)
			}
			installed := filesUnder(t, filepath.Join(c.dest, c.prefix))
			checkInstalled(t, c, home)
			if c.dest == "" {
				followREADME(t, c, home, tmp)
			}
			mk(t, append([]string{"uninstall"}, c.vars...)...)
			for _, f := range installed {
				if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("make uninstall left %s (%v)", f, err)
				}
			}
			for _, d := range []string{"lib/octosup", "share/doc/octosup"} {
				if _, err := os.Lstat(filepath.Join(c.dest, c.prefix, d)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("make uninstall left the directory %s", filepath.Join(c.prefix, d))
				}
			}
		})
	}
}

// checkInstalled checks the installed tree of c: the units, what they run
// and document, and the example manifest's programs.
func checkInstalled(t *testing.T, c installCase, home string) {
	t.Helper()
	in := func(p string) string { return filepath.Join(c.dest, strings.ReplaceAll(p, "%h", home)) }
	unitDir := filepath.Join(c.prefix, "share/systemd/user")
	service := unitKeys(t, in(filepath.Join(unitDir, "octosupd.service")))
	if _, err := os.Stat(in(filepath.Join(unitDir, "octosupd.socket"))); err != nil {
		t.Errorf("the socket unit: %v", err)
	}
	var run []string
	for _, key := range []string{"ExecStart", "ExecReload"} {
		fields := strings.Fields(service[key])
		if len(fields) == 0 {
			t.Errorf("octosupd.service has no %s", key)
			continue
		}
		run = append(run, fields[0])
	}
	if len(run) > 0 {
		// octosupd runs the jail helper found next to it.
		run = append(run, filepath.Join(filepath.Dir(run[0]), "octosup-jail"))
	}
	doc, ok := strings.CutPrefix(service["Documentation"], "file://")
	if !ok {
		t.Errorf("Documentation=%q is not a file:// URL", service["Documentation"])
	}
	if _, err := os.Stat(in(doc)); err != nil {
		t.Errorf("the service's Documentation= names a file that is not installed: %v", err)
	}
	for _, want := range []string{filepath.Join(c.prefix, "bin/octosupd"), filepath.Join(c.prefix, "bin/octosupctl")} {
		if !slices.ContainsFunc(run, func(p string) bool { return strings.ReplaceAll(p, "%h", home) == want }) {
			t.Errorf("the service runs %q, want %s (the PREFIX's)", run, want)
		}
	}

	example := filepath.Join(c.prefix, "share/doc/octosup/configs/native-apps.example.json")
	data, err := os.ReadFile(in(example))
	if err != nil {
		t.Fatalf("the example manifest: %v", err)
	}
	m, err := policy.Parse(data)
	if err != nil {
		t.Fatalf("the installed example manifest: %v", err)
	}
	if len(m.Apps) == 0 {
		t.Errorf("the installed example manifest has no apps")
	}
	for _, a := range m.Apps {
		if !strings.HasPrefix(a.Exec[0], c.prefix+"/") {
			t.Errorf("the example manifest runs %s for %s, not a program of the PREFIX %s", a.Exec[0], a.ID, c.prefix)
		}
		run = append(run, a.Exec[0])
	}
	for _, p := range run {
		fi, err := os.Stat(in(p))
		switch {
		case err != nil:
			t.Errorf("not installed: %v", err)
		case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
			t.Errorf("%s is installed %v, not an executable file", p, fi.Mode())
		}
	}
}

// followREADME does what the README's "Installing as a user service" says,
// with the service's ExecStart run here, under a NOTIFY_SOCKET, in place
// of systemctl --user (no user manager is assumed).
func followREADME(t *testing.T, c installCase, home, tmp string) {
	t.Helper()
	config := filepath.Join(home, ".config/octosup")
	if err := os.MkdirAll(config, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(config, "native-apps.json")
	data, err := os.ReadFile(filepath.Join(c.prefix, "share/doc/octosup/configs/native-apps.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(tmp, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	// The service's environment: no XDG variable but the runtime dir, as
	// a user manager gives.
	env := []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "XDG_RUNTIME_DIR=" + runtime}
	ctl := filepath.Join(c.prefix, "bin/octosupctl")

	out, err := command(env, ctl, "validate", manifest).CombinedOutput()
	if want := manifest + " is valid: 2 apps\n"; err != nil || string(out) != want {
		t.Fatalf("octosupctl validate: %v\n%s\nwant only: %s", err, out, want)
	}

	notifyPath := filepath.Join(tmp, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 16)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { notify.Close(); <-readerDone })

	service := unitKeys(t, filepath.Join(c.prefix, "share/systemd/user/octosupd.service"))
	argv := strings.Fields(strings.ReplaceAll(service["ExecStart"], "%h", home))
	daemon := command(append(env, "NOTIFY_SOCKET="+notifyPath), argv[0], argv[1:]...)
	var log bytes.Buffer
	daemon.Stdout, daemon.Stderr = &log, &log
	daemon.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			daemon.Process.Kill()
			<-exited
		}
	})

	deadline := time.After(2 * time.Minute)
	for ready := false; !ready; {
		select {
		case m := <-msgs:
			ready = slices.Contains(strings.Split(m, "\n"), "READY=1")
			if ready && !strings.Contains(m, "STATUS=2 apps: 2 running") {
				t.Errorf("READY=1 came with %q, want STATUS=2 apps: 2 running", m)
			}
		case err := <-exited:
			stopped = true
			t.Fatalf("octosupd exited before READY=1: %v\n%s", err, log.String())
		case <-deadline:
			t.Fatalf("no READY=1 from octosupd in 2 minutes")
		}
	}

	out, err = command(env, ctl, "--json", "status").Output()
	if err != nil {
		t.Fatalf("octosupctl status: %v", err)
	}
	var status struct {
		Apps []struct{ ID, State, Reason string }
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("octosupctl status: %v\n%s", err, out)
	}
	states := map[string]string{}
	for _, a := range status.Apps {
		states[a.ID] = a.State + a.Reason
	}
	if states["clock"] != "running" || states["notes"] != "running" || len(states) != 2 {
		t.Errorf("apps after READY=1: %v, want clock and notes running", states)
	}

	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	stopped = true
	if err != nil {
		t.Errorf("octosupd on SIGTERM: %v\n%s", err, log.String())
	}
}

// makeRunner returns a function that runs make in root for a user whose
// home is home, building into bin, and returns what make printed.
func makeRunner(t *testing.T, root, home, bin string) func(t *testing.T, args ...string) string {
	// The go command finds its caches under HOME: keep this user's, or
	// every build would start cold (and fetch modules).
	goEnv, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var vars map[string]string
	if err := json.Unmarshal(goEnv, &vars); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		// The XDG places follow the test's HOME (make install follows
		// them), whatever the user's say.
		case "HOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PREFIX", "DESTDIR", "BIN",
			"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root, "BIN=" + bin}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

func command(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	return cmd
}

// unitKeys reads a unit file's Key=Value lines (the units here set each key
// once).
func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("unit: %v", err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			keys[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// filesUnder lists the files (not directories) beneath dir.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("make install installed nothing under %s", dir)
	}
	return files
}
