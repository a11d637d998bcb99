package main

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

// tree is the private HOME and XDG places the daemon runs in; a second
// daemon on the same tree finds the first one's state.
type tree struct {
	dir      string
	manifest string
	env      []string
	socket   string
}

func newTree(dir string, apps []policy.App) (*tree, error) {
	if apps == nil {
		apps = []policy.App{}
	}
	b, err := json.MarshalIndent(policy.Manifest{Version: 1, Apps: apps}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	if _, err := policy.Parse(b); err != nil {
		return nil, fmt.Errorf("octosup refuses the manifest chaos wrote (update chaos/ to the manifest format): %w", err)
	}
	places := map[string]string{
		"HOME":            filepath.Join(dir, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
		"XDG_STATE_HOME":  filepath.Join(dir, "state"),
		"XDG_DATA_HOME":   filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME": filepath.Join(dir, "config"),
	}
	t := &tree{dir: dir, manifest: filepath.Join(dir, "native-apps.json"), env: []string{"PATH=" + os.Getenv("PATH")}}
	for k, v := range places {
		if err := os.MkdirAll(v, 0o700); err != nil {
			return nil, fmt.Errorf("the daemon's tree: %w", err)
		}
		t.env = append(t.env, k+"="+v)
	}
	t.socket = filepath.Join(places["XDG_RUNTIME_DIR"], "octosup", "control.sock")
	if err := os.WriteFile(t.manifest, b, 0o600); err != nil {
		return nil, fmt.Errorf("write the manifest: %w", err)
	}
	return t, nil
}

// daemon is one octosupd process on a tree.
type daemon struct {
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	waitErr error
}

// startDaemon runs octosupd on t and returns once it said READY=1 (every
// autostart app started), or with the end of its log.
func startDaemon(ctx context.Context, bin string, t *tree, name string, timeout time.Duration) (*daemon, error) {
	nsock := filepath.Join(t.dir, "notify-"+name+".sock")
	os.Remove(nsock)
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer notify.Close()
	logPath := filepath.Join(t.dir, "octosupd-"+name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", t.manifest)
	cmd.Env = append(append([]string{}, t.env...), "NOTIFY_SOCKET="+nsock)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Our death takes the daemon along, and its apps die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d := &daemon{cmd: cmd, log: logPath, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	stopRead := func() { notify.SetReadDeadline(time.Now()) }
	timer := time.AfterFunc(timeout, stopRead)
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
			why := fmt.Sprintf("it did not say READY=1 within %v", timeout)
			select {
			case <-d.exited:
				why = fmt.Sprintf("it exited (%v)", d.waitErr)
			default:
				if ctx.Err() != nil {
					why = ctx.Err().Error()
				}
			}
			d.kill()
			return nil, fmt.Errorf("octosupd %s: %s; %s", name, why, d.logTail(20))
		}
		if bytes.Contains(append([]byte("\n"), buf[:n]...), []byte("\nREADY=1")) {
			return d, nil
		}
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// kill SIGKILLs the daemon and reaps it.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	<-d.exited
}

// stop ends the daemon as systemd does (SIGTERM: it stops its apps),
// SIGKILL after grace.
func (d *daemon) stop(grace time.Duration) error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(grace):
		d.kill()
		return fmt.Errorf("octosupd did not stop within %v of SIGTERM; killed", grace)
	}
}

func (d *daemon) logTail(lines int) string {
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
