package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"octosup/control"
	"octosup/peer"
)

// The style of an error's message (docs/control.md, "Error codes"): what
// happened and what to do, without the op or the app the client asked
// about, which it says once itself, and without the code, which the
// answer carries.

// allOps are the ops whose name a message must not begin with.
var allOps = []string{
	control.OpStatus, control.OpStart, control.OpStop, control.OpRestart, control.OpLogs, control.OpSubscribe,
	control.OpReload, control.OpHello, control.OpApprovals, control.OpApprove, control.OpConsent, control.OpAppSend,
	control.OpKernelAttach, control.OpRequestReply, control.OpRequestEvent, control.OpToolCall, control.OpToolCancel,
	control.OpContextOwner, control.OpContextList, control.OpLinkHas, control.OpAccountClose, control.OpRules,
	control.OpAudit, control.OpJail,
}

// styleProblem says how an error answer to op about app breaks the style
// ("" when it does not).
func styleProblem(op, app string, e *control.Error) string {
	msg := e.Message
	lower := strings.ToLower(msg)
	switch {
	case msg == "":
		return "an empty message"
	case strings.HasPrefix(lower, strings.ReplaceAll(e.Code, "_", " ")+":") || strings.HasPrefix(msg, e.Code+":"):
		return "it begins with its code"
	case strings.Contains(lower, "invalid argument"):
		return `it says "invalid argument", a Go sentinel's text`
	}
	for _, o := range allOps {
		if strings.HasPrefix(msg, o+" ") || strings.HasPrefix(msg, o+":") {
			return "it begins with the op " + o
		}
	}
	if app != "" {
		for _, p := range []string{`app "` + app + `"`, "app " + app, " of " + app, " to " + app, `"` + app + `"`, " " + app + ":"} {
			if strings.Contains(msg, p) {
				return "it names the app " + app
			}
		}
	}
	return ""
}

// checkStyle fails t when an error answer breaks the style.
func checkStyle(t *testing.T, op, app string, e *control.Error) {
	t.Helper()
	if e == nil {
		t.Fatalf("%s: no error", op)
	}
	if p := styleProblem(op, app, e); p != "" {
		t.Errorf("%s (app %q): %s: %q", op, app, p, e.Message)
	}
}

// TestErrorStyleOfTheGoldenSessions: every error answer of the control
// golden files, a real daemon's sessions, keeps the style.
func TestErrorStyleOfTheGoldenSessions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "control", "testdata", "golden", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	codes := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		type req struct {
			op, app string
		}
		asked := map[int64]req{}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			dir, text, _ := strings.Cut(sc.Text(), " ")
			var line struct {
				ID    *int64         `json:"id"`
				Op    string         `json:"op"`
				Args  map[string]any `json:"args"`
				Error *control.Error `json:"error"`
			}
			if json.Unmarshal([]byte(text), &line) != nil {
				continue // a request the daemon refused as malformed
			}
			if dir == ">" && line.ID != nil {
				app, _ := line.Args["app"].(string)
				asked[*line.ID] = req{line.Op, app}
				continue
			}
			if dir == "<" && line.Error != nil {
				var r req
				if line.ID != nil {
					r = asked[*line.ID]
				}
				codes[line.Error.Code] = true
				checkStyle(t, r.op, r.app, line.Error)
			}
		}
	}
	t.Logf("codes in the golden sessions: %v", slices.Sorted(func(yield func(string) bool) {
		for c := range codes {
			if !yield(c) {
				return
			}
		}
	}))
}

// TestErrorStyleCoversEveryCode: between the golden sessions and the
// refusals TestToolOpsRefusals walks (each checked by checkStyle), every
// code of docs/control.md's table is held to the style, except those
// this list names with where their message comes from, each checked here.
func TestErrorStyleCoversEveryCode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "control.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(b), "## Error codes")
	var documented []string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "| `") {
			code, _, _ := strings.Cut(strings.TrimPrefix(l, "| `"), "`")
			documented = append(documented, code)
		}
	}
	walked := []string{
		// the golden sessions
		"bad_request", "unknown_op", "unknown_app", "invalid_manifest", "not_attached", "kernel_attached", "unknown_approval",
		// TestToolOpsRefusals
		"not_connected", "duplicate", "unknown_context", "declined", "unknown_call",
	}
	// The rest of the refusals a client meets, from a real daemon.
	env := newTestEnv(t)
	env.writeManifest(t, []byte(`{"version": 1, "apps": [{"id": "ghost", "exec": ["/nonexistent/ghost"], "grants": {}, "sandbox": {"policy": "broad"}, "storage": {}}]}`))
	d := startDaemon(t, env)
	k := dialRaw(t, d.client.Path)
	for i, c := range []struct{ op, app, args, code string }{
		{control.OpStart, "ghost", `{"app":"ghost"}`, control.CodeFailed},
		{control.OpKernelAttach, "", `{}`, ""},
		{control.OpRequestReply, "ghost", `{"app":"ghost","req_id":"r1","ok":true}`, "unknown_request"},
		{control.OpAppSend, "ghost", `{"app":"ghost","frame":{"octos_peer":{"type":"reply"}}}`, control.CodeBadRequest},
		{control.OpToolCall, "ghost", `{"app":"ghost","call":{"call_id":"c1","name":"t","confirm":"none","timeout_ms":5,"context_id":"x","caller":"k"}}`, "not_connected"},
	} {
		k.send(fmt.Sprintf(`{"id":%d,"op":%q,"args":%s}`, i+1, c.op, c.args))
		resp := k.response()
		if c.code == "" {
			if !resp.OK {
				t.Fatalf("%s: %+v", c.op, resp.Error)
			}
			continue
		}
		if resp.OK || resp.Error.Code != c.code {
			t.Fatalf("%s: %+v %+v, want %s", c.op, resp.OK, resp.Error, c.code)
		}
		checkStyle(t, c.op, c.app, resp.Error)
		walked = append(walked, c.code)
	}
	walked = append(walked, "quota_exceeded") // TestToolOpsCallsCap
	// Sentences of their own, checked as they are.
	elsewhere := map[string]*control.Error{
		"not_permitted":   {Code: "not_permitted", Message: fmt.Sprintf("uid %d may not use this control socket: octosupd serves only uid %d", 1000, 0)},
		"kernel_detached": {Code: "kernel_detached", Message: peer.ErrKernelDetached.Error()},
		"queue_full":      {Code: "queue_full", Message: peer.ErrQueueFull.Error()},
		"internal":        {Code: "internal", Message: "the daemon lost this op's answer (a bug, logged): the op may have taken effect"},
	}
	for _, code := range documented {
		if e, ok := elsewhere[code]; ok {
			checkStyle(t, "", "", e)
			continue
		}
		if !slices.Contains(walked, code) {
			t.Errorf("code %s is documented but no test here holds its messages to the style", code)
		}
	}
}

// TestStyleProblem: the check catches what a shell team met.
func TestStyleProblem(t *testing.T) {
	for _, c := range []struct{ op, app, code, msg string }{
		{control.OpAppSend, "hubapp", "bad_request", "app.send to hubapp: invalid argument: bad_frame: the frame is not JSON"},
		{control.OpContextOwner, "hubapp", "unknown_context", "context n-1 of hubapp: unknown context: the app has no such open context"},
		{control.OpToolCall, "hubapp", "declined", "declined: hub.nope is not in the grants.tools of app hubapp"},
		{control.OpToolCall, "hubapp", "duplicate", "duplicate: duplicate call_id: it is in use"},
		{control.OpRequestReply, "", "not_attached", "request.reply: this connection is not the kernel: send kernel.attach first"},
		{control.OpStart, "nope", "unknown_app", `no app "nope" in the manifest`},
		{control.OpStart, "ghost", "failed", "failed to start: jail ghost: program not found"},
		{control.OpApprove, "", "bad_request", "approve needs args.approval_id"},
		{control.OpStart, "x", "failed", ""},
	} {
		if styleProblem(c.op, c.app, &control.Error{Code: c.code, Message: c.msg}) == "" {
			t.Errorf("%q passes", c.msg)
		}
	}
	if p := styleProblem(control.OpToolCall, "notes", &control.Error{Code: "declined", Message: "notes.delete is not in the app's grants.tools: add it to the manifest entry to let the app receive it"}); p != "" {
		t.Errorf("a message in the style is refused: %s", p)
	}
}
