package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"octosup/control"
)

// probeApp is the app of TestJailedFromTheManifest (DAEMON_TEST_PROBE):
// it tries what its jail must refuse and what it must allow, and prints
// one line per attempt: "probe NAME ok" or "probe NAME ERRNO".
func probeApp() int {
	report := func(name string, err error) {
		var errno syscall.Errno
		switch {
		case err == nil:
			fmt.Printf("probe %s ok\n", name)
		case errors.As(err, &errno):
			fmt.Printf("probe %s %s\n", name, errnoName(errno))
		default:
			fmt.Printf("probe %s %v\n", name, err)
		}
	}
	_, err := os.ReadFile(os.Getenv("PROBE_HOME_FILE"))
	report("read-home", err)
	_, err = os.ReadFile("/etc/passwd")
	report("read-etc", err)
	err = os.WriteFile(filepath.Join(os.Getenv("OCTOSUP_JAIL"), "x"), []byte("x"), 0o600)
	report("write-jail", err)
	err = os.WriteFile(filepath.Join(filepath.Dir(os.Getenv("PROBE_HOME_FILE")), "y"), []byte("y"), 0o600)
	report("write-home", err)
	c, err := net.Dial("unix", os.Getenv("PROBE_CONTROL"))
	if err == nil {
		c.Close()
	}
	report("connect-control", err)
	pid, _ := strconv.Atoi(os.Getenv("PROBE_DAEMON_PID"))
	report("kill-daemon", syscall.Kill(pid, 0))
	fmt.Println("probe done")
	return 0
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	}
	return e.Error()
}

// TestJailedFromTheManifest: an app of a real manifest, started by the
// real daemon, runs in the jail its entry asks for — the rules proven one
// by one in package jail hold end to end.
func TestJailedFromTheManifest(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	homeFile := filepath.Join(env.vars["HOME"], "secret.txt")
	if err := os.WriteFile(homeFile, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	env.writeManifest(t, []byte(fmt.Sprintf(`{"version":1,"apps":[{"id":"probe","exec":[%q],
		"env":{"DAEMON_TEST_PROBE":"1","PROBE_HOME_FILE":%q,"PROBE_CONTROL":%q,"PROBE_DAEMON_PID":"%d"},
		"grants":{},"sandbox":{"policy":"jail","network":"none","processes":false},"storage":{"jail":true}}]}`,
		exe, homeFile, env.dirs.ControlSocket(), os.Getpid())))
	d := startDaemon(t, env)
	logs := followLogs(t, d.client, "probe")
	var sd control.StateData
	if err := d.client.Do(context.Background(), control.OpStart, control.AppArgs{App: "probe"}, &sd); err != nil {
		t.Fatalf("start probe: %v", err)
	}
	if sd.App.Jail == nil || !strings.Contains(strings.Join(sd.App.Jail.Layers, ","), "landlock") || !strings.Contains(strings.Join(sd.App.Jail.Layers, ","), "seccomp") {
		t.Fatalf("the probe's jail layers: %+v", sd.App.Jail)
	}
	want := map[string]string{
		"read-home":       "EACCES",
		"read-etc":        "ok",
		"write-jail":      "ok",
		"write-home":      "EACCES",
		"connect-control": "EPERM",
		"kill-daemon":     "EPERM",
	}
	got := map[string]string{}
	for {
		line := appSaw(t, logs, "probe ")
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "done" {
			break
		}
		if len(f) >= 3 {
			got[f[1]] = strings.Join(f[2:], " ")
		}
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %s", name, got[name], w)
		}
	}
}
