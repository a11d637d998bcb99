package pyclient

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the walkthrough's chat app
// (PYCLIENT_TEST_CHAT=1): it opens a session, starts a turn once the
// session is open, and prints every frame it is sent.
func TestMain(m *testing.M) {
	if os.Getenv("PYCLIENT_TEST_CHAT") == "1" {
		os.Exit(chatApp())
	}
	os.Exit(m.Run())
}

func chatApp() int {
	hub := os.NewFile(3, "hub")
	send := func(line string) {
		if _, err := hub.Write([]byte(line + "\n")); err != nil {
			fmt.Fprintln(os.Stderr, "hub write:", err)
			os.Exit(1)
		}
	}
	send(`{"octos_peer":{"type":"request","req_id":"open-1","method":"octos.session.open","args":{"title":"chat"}}}`)
	sc := bufio.NewScanner(hub)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Printf("got %s\n", sc.Bytes())
		var f struct {
			Peer struct {
				Type  string `json:"type"`
				ReqID string `json:"req_id"`
				OK    bool   `json:"ok"`
				Data  struct {
					ContextID string `json:"context_id"`
				} `json:"data"`
			} `json:"octos_peer"`
		}
		if json.Unmarshal(sc.Bytes(), &f) == nil && f.Peer.Type == "reply" && f.Peer.ReqID == "open-1" && f.Peer.OK {
			send(fmt.Sprintf(`{"octos_peer":{"type":"request","req_id":"turn-1","method":"octos.turn.start","args":{"context_id":%q,"input":"hello?"}}}`, f.Peer.Data.ContextID))
		}
	}
	return 0
}

// TestPythonWalkthrough runs walkthrough.py against a real octosupd: the
// demo notes app jailed as the example manifest has it, and the chat app.
func TestPythonWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real daemon: skipped under -short")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python control client (tools/pyclient) is not run")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build octosupd and the notes app")
	}
	bin := t.TempDir()
	build := func(cgo, out string, pkgs ...string) {
		t.Helper()
		cmd := exec.Command(goBin, append([]string{"build", "-o", out}, pkgs...)...)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", pkgs, err, b)
		}
	}
	build("1", bin+"/", "./cmd/octosupd", "./cmd/octosup-jail") // the helper's setup sequence is C (jail/spawn)
	build("0", bin+"/", "./examples/notes")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	env := map[string]string{
		"HOME":            filepath.Join(root, "home"),
		"XDG_RUNTIME_DIR": filepath.Join(root, "run"),
		"XDG_CONFIG_HOME": filepath.Join(root, "config"),
		"XDG_STATE_HOME":  filepath.Join(root, "state"),
		"XDG_DATA_HOME":   filepath.Join(root, "data"),
	}
	for _, d := range env {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(root, "native-apps.json")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(walkthroughManifest, filepath.Join(bin, "notes"), exe)), 0o600); err != nil {
		t.Fatal(err)
	}
	notify := filepath.Join(root, "notify.sock")
	ready, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()

	environ := []string{"PATH=/usr/bin:/bin", "NOTIFY_SOCKET=" + notify}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	daemon := exec.CommandContext(ctx, filepath.Join(bin, "octosupd"), "run", "--config", manifest)
	daemon.Env = environ
	var dlog strings.Builder
	daemon.Stderr = &dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	defer func() {
		daemon.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			daemon.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("octosupd's log:\n%s", dlog.String())
		}
	}()
	// READY=1: the control socket is served and the apps are started.
	buf := make([]byte, 4096)
	for {
		ready.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := ready.Read(buf)
		if err != nil {
			t.Fatalf("octosupd did not say READY=1: %v\n%s", err, dlog.String())
		}
		if strings.HasPrefix(string(buf[:n]), "READY=1") {
			break
		}
	}

	start := time.Now()
	walk := exec.CommandContext(ctx, python, "walkthrough.py",
		"--socket", filepath.Join(env["XDG_RUNTIME_DIR"], "octosup", "control.sock"), "--notes", "notes", "--chat", "chat")
	walk.Env = append(environ, "PYTHONDONTWRITEBYTECODE=1")
	out, err := walk.CombinedOutput()
	t.Logf("walkthrough.py (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("walkthrough.py: %v", err)
	}
	if !strings.Contains(string(out), "walkthrough done") {
		t.Fatal("walkthrough.py exited 0 without finishing")
	}
}

const walkthroughManifest = `{
  "version": 1,
  "apps": [{
    "id": "notes",
    "exec": [%[1]q, "--hub-fd", "3"],
    "autostart": true,
    "grants": {"services": ["agent.octos"],
      "methods": ["octos.session.open", "octos.session.history", "octos.turn.start", "octos.turn.interrupt", "octos.context.close"],
      "tools": ["notes.search", "notes.append"]},
    "sandbox": {"policy": "jail", "network": "none", "processes": false, "accounts": ["personal"]},
    "storage": {"jail": true, "secrets": false}
  }, {
    "id": "chat",
    "exec": [%[2]q],
    "autostart": true,
    "env": {"PYCLIENT_TEST_CHAT": "1"},
    "grants": {"services": ["agent.octos"], "methods": ["octos.session.open", "octos.turn.start"]},
    "sandbox": {"policy": "broad", "network": "full"},
    "storage": {}
  }]
}`
