package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"octosup/policy"
)

// Tree is the private HOME and XDG places a daemon runs in, with its
// manifest. A second daemon on the same tree finds the first one's state.
type Tree struct {
	Dir      string
	Manifest string // the manifest's path, passed to octosupd run --config
	Socket   string // the control socket a daemon on the tree listens on
	env      []string
}

// Manifest encodes apps as a manifest and checks it with policy.Parse,
// so that a caller that drifts from the format says so before any
// daemon starts.
func Manifest(apps []policy.App) ([]byte, error) {
	if apps == nil {
		apps = []policy.App{}
	}
	b, err := json.MarshalIndent(policy.Manifest{Version: 1, Apps: apps}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	if _, err := policy.Parse(b); err != nil {
		return nil, fmt.Errorf("octosup refuses the manifest its caller built (update the caller's apps to the manifest format): %w", err)
	}
	return b, nil
}

// NewTree makes the HOME and XDG places below dir and writes apps there
// as the manifest (see Manifest).
func NewTree(dir string, apps []policy.App) (*Tree, error) {
	b, err := Manifest(apps)
	if err != nil {
		return nil, err
	}
	places := map[string]string{
		"HOME":            filepath.Join(dir, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
		"XDG_STATE_HOME":  filepath.Join(dir, "state"),
		"XDG_DATA_HOME":   filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME": filepath.Join(dir, "config"),
	}
	t := &Tree{Dir: dir, Manifest: filepath.Join(dir, "native-apps.json"), env: []string{"PATH=" + os.Getenv("PATH")}}
	for k, v := range places {
		if err := os.MkdirAll(v, 0o700); err != nil {
			return nil, fmt.Errorf("the daemon's tree: %w", err)
		}
		t.env = append(t.env, k+"="+v)
	}
	// Where the daemon will listen is octosup's to say, from the same
	// variables.
	dirs, err := policy.DirsFromEnv(func(k string) string { return places[k] })
	if err != nil {
		return nil, fmt.Errorf("the daemon's tree: %w", err)
	}
	t.Socket = dirs.ControlSocket()
	if err := os.WriteFile(t.Manifest, b, 0o600); err != nil {
		return nil, fmt.Errorf("write the manifest: %w", err)
	}
	return t, nil
}

// Options are how one daemon is started on a tree.
type Options struct {
	// Name tells daemons on one tree apart: their NOTIFY_SOCKET and log
	// are notify-NAME.sock and octosupd-NAME.log in the tree (without
	// one, notify.sock and octosupd.log).
	Name string
	// Args follow "run --config MANIFEST".
	Args []string
	// Env is added to the tree's environment (PATH, HOME, XDG_*,
	// NOTIFY_SOCKET).
	Env []string
	// Timeout bounds exec → READY=1; it must be set.
	Timeout time.Duration
}

// Daemon is one octosupd process on a tree.
type Daemon struct {
	cmd     *exec.Cmd
	log     string
	exited  chan struct{} // closed when the process was reaped
	waitErr error         // set before exited closes

	// Ready is exec of octosupd → READY=1 on its NOTIFY_SOCKET.
	Ready time.Duration
}

// Start execs bin run on t and returns once the daemon said READY=1
// (every autostart app started), or, when it exits, ctx ends or
// o.Timeout passes first, kills it and says why with the end of its log.
// The daemon dies with the calling thread's process (Pdeathsig), and its
// apps with it.
func Start(ctx context.Context, bin string, t *Tree, o Options) (*Daemon, error) {
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("start %s: Options.Timeout is %v: say how long it may take to say READY=1", bin, o.Timeout)
	}
	notifyName, logName := "notify.sock", "octosupd.log"
	if o.Name != "" {
		notifyName, logName = "notify-"+o.Name+".sock", "octosupd-"+o.Name+".log"
	}
	nsock := filepath.Join(t.Dir, notifyName)
	os.Remove(nsock) // a run before this one on the same directory
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer notify.Close()
	logPath := filepath.Join(t.Dir, logName)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// The child has its own copy of the descriptor.
	defer logf.Close()
	env := append(append([]string{}, t.env...), "NOTIFY_SOCKET="+nsock)
	cmd := exec.Command(bin, append([]string{"run", "--config", t.Manifest}, o.Args...)...)
	cmd.Env = append(env, o.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d := &Daemon{cmd: cmd, log: logPath, exited: make(chan struct{})}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	// Its exit, ctx or the timeout unblock the read below.
	stopRead := func() { notify.SetReadDeadline(time.Now()) }
	timer := time.AfterFunc(o.Timeout, stopRead)
	defer timer.Stop()
	defer context.AfterFunc(ctx, stopRead)()
	waiting := make(chan struct{})
	defer close(waiting)
	go func() {
		select {
		case <-d.exited:
			stopRead()
		case <-waiting:
		}
	}()
	buf := make([]byte, 4096)
	for {
		n, _, err := notify.ReadFromUnix(buf)
		if err != nil {
			why := fmt.Sprintf("it did not say READY=1 within %v", o.Timeout)
			select {
			case <-d.exited:
				why = fmt.Sprintf("it exited (%v)", d.waitErr)
			default:
				if ctx.Err() != nil {
					why = ctx.Err().Error()
				}
			}
			d.Kill()
			return nil, fmt.Errorf("octosupd %s: %s; %s", bin, why, d.LogTail(20))
		}
		if bytes.Contains(append([]byte("\n"), buf[:n]...), []byte("\nREADY=1")) {
			d.Ready = time.Since(t0)
			return d, nil
		}
	}
}

// Pid is the daemon's pid.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Exited is closed once the daemon's process was reaped.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// Signal sends sig to the daemon (an error once it was reaped).
func (d *Daemon) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// Kill SIGKILLs the daemon and reaps it; on a daemon already reaped it
// does nothing.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// Stop ends the daemon as systemd does (SIGTERM: it stops its apps),
// SIGKILL after grace.
func (d *Daemon) Stop(grace time.Duration) error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(grace):
		d.Kill()
		return fmt.Errorf("octosupd did not stop within %v of SIGTERM; killed", grace)
	}
}

// LogPath is the file the daemon's stdout and stderr go to.
func (d *Daemon) LogPath() string { return d.log }

// LogTail says how the daemon's log ends, in at most lines lines, for an
// error message.
func (d *Daemon) LogTail(lines int) string {
	b, err := os.ReadFile(d.log)
	if err != nil {
		return "its log cannot be read: " + err.Error()
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return "it logged nothing"
	}
	all := strings.Split(text, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "its log (" + d.log + ") ends:\n  " + strings.Join(all, "\n  ")
}
