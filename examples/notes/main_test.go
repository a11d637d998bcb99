package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary be the notes app in a child process, with
// its hub on fd 3 as octosupd gives it.
func TestMain(m *testing.M) {
	if os.Getenv("NOTES_TEST_CHILD") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

type hubEnd struct {
	t  *testing.T
	f  *os.File
	sc *bufio.Scanner
}

func (h *hubEnd) send(frame string) {
	h.t.Helper()
	if _, err := h.f.Write([]byte(frame + "\n")); err != nil {
		h.t.Fatal(err)
	}
}

func (h *hubEnd) next() map[string]any {
	h.t.Helper()
	h.f.SetReadDeadline(time.Now().Add(10 * time.Second))
	if !h.sc.Scan() {
		h.t.Fatalf("hub closed: %v", h.sc.Err())
	}
	var env struct {
		Peer map[string]any `json:"octos_peer"`
	}
	if err := json.Unmarshal(h.sc.Bytes(), &env); err != nil || env.Peer == nil {
		h.t.Fatalf("bad frame %q: %v", h.sc.Bytes(), err)
	}
	return env.Peer
}

func TestNotesApp(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.SetNonblock(fds[0], true)
	daemon := os.NewFile(uintptr(fds[0]), "daemon")
	child := os.NewFile(uintptr(fds[1]), "child")
	defer daemon.Close()
	jail := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "NOTES_TEST_CHILD=1", "OCTOSUP_HUB_FD=3", "OCTOSUP_JAIL="+jail, "OCTOSUP_APP_ID=notes")
	cmd.ExtraFiles = []*os.File{child}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	h := &hubEnd{t: t, f: daemon, sc: bufio.NewScanner(daemon)}

	if f := h.next(); f["type"] != "request" || f["method"] != "octos.session.open" {
		t.Fatalf("first frame %v", f)
	}
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c1","name":"notes.append","args":{"text":"buy milk"},"risk":"write","confirm_required":true,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	if f := h.next(); f["call_id"] != "c1" || f["awaiting_confirmation"] != true {
		t.Fatalf("want awaiting_confirmation, got %v", f)
	}
	if f := h.next(); f["call_id"] != "c1" || f["ok"] != true {
		t.Fatalf("want ok, got %v", f)
	}
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c2","name":"notes.append","args":{"text":"call mom"},"risk":"write","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	if f := h.next(); f["call_id"] != "c2" || f["ok"] != true {
		t.Fatalf("want ok without confirmation, got %v", f)
	}
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c3","name":"notes.search","args":{"query":"MILK"},"risk":"read","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	f := h.next()
	data, _ := json.Marshal(f["data"])
	if f["ok"] != true || string(data) != `{"matches":[{"line":1,"text":"buy milk"}]}` {
		t.Fatalf("search: %v", f)
	}
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c4","name":"notes.delete","args":{},"risk":"destructive","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	if f := h.next(); f["ok"] != false {
		t.Fatalf("unknown tool: %v", f)
	}
	// An argument the tool does not take, or one of the wrong type, is
	// refused: a caller that spelled one wrong learns it, instead of a
	// search that "works" on an empty query.
	for i, tc := range []struct{ tool, args, want string }{
		{"notes.search", `{"q":"milk"}`, `unknown argument "q"`},
		{"notes.search", `{"Query":"milk"}`, `unknown argument "Query"`},
		{"notes.search", `{"query":7}`, `"query" is not a string`},
		{"notes.search", `{"delay_ms":"soon"}`, `"delay_ms" is not a number`},
		{"notes.append", `{"text":"x","line":3}`, `unknown argument "line"`},
		{"notes.append", `{"text":true}`, `"text" is not a string`},
		{"notes.search", `[1]`, `wants a JSON object`},
	} {
		id := fmt.Sprintf("bad%d", i)
		h.send(fmt.Sprintf(`{"octos_peer":{"type":"tool_call","call_id":%q,"name":%q,"args":%s,"risk":"write","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`, id, tc.tool, tc.args))
		f := h.next()
		e, _ := f["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if f["call_id"] != id || f["ok"] != false || e["code"] != "bad_frame" || !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, tc.tool+" takes ") {
			t.Errorf("%s %s: got %v, want bad_frame %q", tc.tool, tc.args, f, tc.want)
		}
	}
	notes, _ := os.ReadFile(filepath.Join(jail, "notes.txt"))
	if string(notes) != "buy milk\ncall mom\n" {
		t.Fatalf("notes.txt %q", notes)
	}
	// skip_confirmation: the demo misbehaves on purpose and answers at
	// once although confirmation was required.
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c5","name":"notes.append","args":{"text":"z","skip_confirmation":true},"risk":"write","confirm_required":true,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	if f := h.next(); f["call_id"] != "c5" || f["ok"] != true {
		t.Fatalf("want ok without awaiting_confirmation, got %v", f)
	}
	// A delayed search that is cancelled is never answered: the next
	// frame is the answer to the call after it.
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c6","name":"notes.search","args":{"query":"milk","delay_ms":200},"risk":"read","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	h.send(`{"octos_peer":{"type":"tool_cancel","call_id":"c6","reason":"timeout"}}`)
	h.send(`{"octos_peer":{"type":"tool_call","call_id":"c7","name":"notes.search","args":{"query":"milk","delay_ms":400},"risk":"read","confirm_required":false,"timeout_ms":1000,"account":"personal","context_id":"n-1","client":"notes","caller":"assistant"}}`)
	if f := h.next(); f["call_id"] != "c7" || f["ok"] != true {
		t.Fatalf("want the answer to c7 (c6 was cancelled), got %v", f)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "received: ") || !strings.Contains(out.String(), "stopping") {
		t.Fatalf("stdout:\n%s", out.String())
	}
}
