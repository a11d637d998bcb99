package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"octosup/control"
	"octosup/internal/wireschema"
)

var updateGolden = flag.Bool("update", false, "rewrite control/testdata/golden from a real daemon's session")

// controlGolden is where the control socket's golden files live: with
// its wire format, in package control.
const controlGolden = "../control/testdata/golden"

// goldenNotesApp (DAEMON_TEST_HUBAPP=golden) is the golden session's hub
// app, a notes app in small: it opens the session "groceries", starts a
// turn on it, serves notes.search, notes.append (asking its person when
// the call says confirm_required) and notes.wait (never answered), and
// answers a pass-through {"ui":{"ping":N}} with {"ui":{"pong":N}}. It
// prints every hub line, "up" what it sent and "down" what it got, for
// the session's schema checks.
func goldenNotesApp() int {
	hub := os.NewFile(3, "hub")
	var mu sync.Mutex
	send := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("up %s\n", line)
		if _, err := hub.Write([]byte(line + "\n")); err != nil {
			fmt.Fprintln(os.Stderr, "hub write:", err)
			os.Exit(1)
		}
	}
	send(`{"octos_peer":{"type":"request","req_id":"open-1","method":"octos.session.open","args":{"account":"personal","title":"groceries"}}}`)
	sc := bufio.NewScanner(hub)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Printf("down %s\n", sc.Bytes())
		var f struct {
			Peer *struct {
				Type            string `json:"type"`
				ReqID           string `json:"req_id"`
				OK              bool   `json:"ok"`
				CallID          string `json:"call_id"`
				Name            string `json:"name"`
				ConfirmRequired bool   `json:"confirm_required"`
				Data            struct {
					ContextID string `json:"context_id"`
				} `json:"data"`
			} `json:"octos_peer"`
			UI *struct {
				Ping *int `json:"ping"`
			} `json:"ui"`
		}
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			continue
		}
		switch p := f.Peer; {
		case f.UI != nil && f.UI.Ping != nil:
			send(fmt.Sprintf(`{"ui":{"pong":%d}}`, *f.UI.Ping))
		case p == nil:
		case p.Type == "reply" && p.ReqID == "open-1" && p.OK:
			send(fmt.Sprintf(`{"octos_peer":{"type":"request","req_id":"turn-1","method":"octos.turn.start","args":{"context_id":%q,"input":"what do I need?"}}}`, p.Data.ContextID))
		case p.Type == "tool_call" && p.Name == "notes.search":
			send(fmt.Sprintf(`{"octos_peer":{"type":"tool_result","call_id":%q,"ok":true,"data":{"matches":[{"line":1,"text":"buy milk"}]}}}`, p.CallID))
		case p.Type == "tool_call" && p.Name == "notes.append":
			if p.ConfirmRequired {
				send(fmt.Sprintf(`{"octos_peer":{"type":"tool_result","call_id":%q,"awaiting_confirmation":true}}`, p.CallID))
			}
			send(fmt.Sprintf(`{"octos_peer":{"type":"tool_result","call_id":%q,"ok":true,"data":{"line":2}}}`, p.CallID))
		}
	}
	return 0
}

// goldenClockApp (DAEMON_TEST_CLOCK=1) is the session's plain app: a line
// at start, then "tick N" at each SIGUSR1, so that its output is the
// test's to time.
func goldenClockApp() int {
	ticks := make(chan os.Signal, 1)
	signal.Notify(ticks, syscall.SIGUSR1)
	fmt.Println("clock started")
	for n := 1; ; n++ {
		<-ticks
		fmt.Printf("tick %d\n", n)
	}
}

const goldenManifest = `{
  "version": 1,
  "apps": [{
    "id": "clock",
    "exec": [%[1]q],
    "autostart": true,
    "env": {"DAEMON_TEST_CLOCK": "1"},
    "sandbox": {"policy": "broad", "network": "full"},
    "storage": {}
  }, {
    "id": "notes",
    "exec": [%[1]q],
    "autostart": true,
    "env": {"DAEMON_TEST_HUBAPP": "golden"},
    "grants": {"services": ["agent.octos"],
      "methods": ["octos.session.open", "octos.session.history", "octos.turn.start", "octos.turn.interrupt", "octos.context.close"],
      "tools": ["notes.search", "notes.append", "notes.wait"]},
    "sandbox": {"policy": "broad", "network": "full", "accounts": ["personal"]},
    "storage": {}
  }]
}`

// wireConn is a control connection spoken line by line whose every line
// is kept: the lines since the last take for a golden file, and all of
// them for the session's schema checks.
type wireConn struct {
	t     *testing.T
	name  string
	ops   map[int64]string // each request's op, by id
	nc    net.Conn
	r     *bufio.Reader
	next  int64
	lines []string // "> " sent, "< " received, since the last take
	rec   *wireRecord
}

// wireRecord is the whole session: every line on every connection, and
// the op of each request id, per connection.
type wireRecord struct {
	mu    sync.Mutex
	lines []wireLine
}

type wireLine struct {
	conn string
	sent bool
	text []byte
	op   string // a request's op, or the op an answer answers
}

func (rec *wireRecord) dial(t *testing.T, path, name string) *wireConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &wireConn{t: t, name: name, ops: map[int64]string{}, nc: nc, r: bufio.NewReaderSize(nc, 1<<20), rec: rec}
}

// send writes one line as it is.
func (c *wireConn) send(line string) {
	c.t.Helper()
	var probe struct {
		ID int64  `json:"id"`
		Op string `json:"op"`
	}
	json.Unmarshal([]byte(line), &probe)
	if probe.ID > 0 {
		c.ops[probe.ID] = probe.Op
	}
	c.lines = append(c.lines, "> "+line)
	c.rec.add(wireLine{conn: c.name, sent: true, text: []byte(line), op: probe.Op})
	if _, err := c.nc.Write([]byte(line + "\n")); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
}

func (rec *wireRecord) add(l wireLine) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.lines = append(rec.lines, l)
}

// read reads and keeps the next line: an answer (id > 0, or null) or an
// event (name set).
func (c *wireConn) read() (line []byte, id int64, event string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("%s: read: %v (so far: %q)", c.name, err, c.lines)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	var probe struct {
		ID    int64   `json:"id"`
		Event *string `json:"event"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		c.t.Fatalf("%s: a line that is not JSON: %q", c.name, b)
	}
	op := ""
	if probe.Event != nil {
		event = *probe.Event
	} else {
		op = c.ops[probe.ID]
	}
	c.lines = append(c.lines, "< "+string(b))
	c.rec.add(wireLine{conn: c.name, text: b, op: op})
	return b, probe.ID, event
}

// do sends op with args (a JSON object, "" for none) and reads up to its
// answer, keeping the events that come first. It fails the test when the
// answer is not ok, unless refused is set.
func (c *wireConn) do(op, args string) []byte {
	c.t.Helper()
	return c.doExpect(op, args, true)
}

func (c *wireConn) doExpect(op, args string, ok bool) []byte {
	c.t.Helper()
	c.next++
	id := c.next
	line := fmt.Sprintf(`{"id":%d,"op":%q`, id, op)
	if args != "" {
		line += `,"args":` + args
	}
	c.send(line + "}")
	for {
		b, got, event := c.read()
		if event != "" || got != id {
			continue
		}
		var resp control.Response
		json.Unmarshal(b, &resp)
		if resp.OK != ok {
			c.t.Fatalf("%s: %s %s answered %s", c.name, op, args, b)
		}
		return b
	}
}

// event reads up to the next event named name, keeping what comes first.
func (c *wireConn) event(name string, match ...string) []byte {
	c.t.Helper()
	for {
		b, _, ev := c.read()
		if ev != name {
			continue
		}
		all := true
		for _, m := range match {
			all = all && bytes.Contains(b, []byte(m))
		}
		if all {
			return b
		}
	}
}

// take returns the lines since the last take.
func (c *wireConn) take() []string {
	out := c.lines
	c.lines = nil
	return out
}

// goldenFiles collects the session's golden files, normalized.
type goldenFiles struct {
	t     *testing.T
	norm  func([]byte) []byte
	files map[string][]string
	order []string
}

func (g *goldenFiles) save(name string, lines []string) {
	g.t.Helper()
	if _, dup := g.files[name]; dup {
		g.t.Fatalf("golden file %s saved twice", name)
	}
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, l[:2]+string(g.norm([]byte(l[2:]))))
	}
	g.files[name] = out
	g.order = append(g.order, name)
}

// TestControlGolden runs a real daemon through every op and event of the
// control socket, the way the README walks through it: a shell that
// subscribes and answers consent and a host confirmation, a kernel that
// answers a turn and calls tools, apps stopped and restarted. What each
// connection saw is compared, normalized (times, pids, the daemon's nonce,
// the machine's paths and jail layers), with control/testdata/golden,
// from which docs/control.md takes its examples (-update rewrites them).
// Every line of the session, on every control connection and on the hub
// app's socket, is validated against the schemas of configs/schema.
func TestControlGolden(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.writeManifest(t, []byte(fmt.Sprintf(goldenManifest, exe)))
	d := startDaemon(t, env)
	ctx := context.Background()

	// Before anything is recorded: the consent prompt is up and the
	// clock has said its first line, so that what follows is the same
	// every run.
	setup := approvalEvents(t, d.client)
	consent := pendingConsent(t, d.client, setup, "notes")
	clockLogs := followLogs(t, d.client, "clock")
	appSaw(t, clockLogs, "clock started")
	clockLogs.conn.Close()

	schemas, err := wireschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	rec := &wireRecord{}
	path := env.dirs.ControlSocket()
	g := &goldenFiles{t: t, norm: goldenNormalizer(env), files: map[string][]string{}}
	shell := rec.dial(t, path, "shell")
	kernel := rec.dial(t, path, "kernel")

	shell.do("hello", "")
	g.save("hello", shell.take())
	shell.do("subscribe", `{"topics":["state","approval","app.frame"]}`)
	g.save("subscribe", shell.take())
	shell.do("approvals", "")
	g.save("approvals", shell.take())

	kernel.do("kernel.attach", "")
	g.save("kernel.attach", kernel.take())
	shell.do("approve", fmt.Sprintf(`{"approval_id":%q,"decision":"allow"}`, consent.ApprovalID))
	g.save("approve", shell.take())

	// The app's session is open; its turn reaches the kernel.
	req := kernel.event("request")
	var kreq struct {
		ContextID string `json:"context_id"`
	}
	json.Unmarshal(req, &kreq)
	kernel.do("request.reply", `{"app":"notes","req_id":"turn-1","ok":true,"data":{"turn_id":"T1"}}`)
	g.save("request.reply", kernel.take())
	kernel.do("request.event", `{"app":"notes","req_id":"turn-1","event":{"type":"text","text":"milk and eggs"}}`)
	kernel.do("request.event", `{"app":"notes","req_id":"turn-1","event":{"type":"turn.end","turn_id":"T1","reason":"completed"}}`)
	g.save("request.event", kernel.take())

	shell.do("status", `{"usage":true}`)
	g.save("status", shell.take())

	kernel.do("context.list", `{"app":"notes"}`)
	g.save("context.list", kernel.take())
	kernel.do("context.owner", fmt.Sprintf(`{"app":"notes","context_id":%q}`, kreq.ContextID))
	g.save("context.owner", kernel.take())
	kernel.do("link.has", `{"app":"notes"}`)
	g.save("link.has", kernel.take())

	call := func(id, tool, args, risk, confirm string) string {
		return fmt.Sprintf(`{"app":"notes","call":{"call_id":%q,"name":%q,"args":%s,"risk":%q,"confirm":%q,"timeout_ms":30000,"context_id":%q,"caller":"assistant"}}`,
			id, tool, args, risk, confirm, kreq.ContextID)
	}
	kernel.do("tool.call", call("c1", "notes.search", `{"q":"milk"}`, "read", "none"))
	kernel.event("tool.finished", `"call_id":"c1"`)
	g.save("tool.call", kernel.take())
	kernel.do("tool.call", call("c2", "notes.append", `{"text":"eggs"}`, "write", "app"))
	kernel.event("tool.finished", `"call_id":"c2"`)
	g.save("tool.call-confirm-app", kernel.take())

	kernel.do("tool.call", call("c3", "notes.append", `{"text":"bread"}`, "write", "host"))
	kernel.event("tool.acknowledged", `"call_id":"c3"`)
	sheet := shell.event("approval", `"kind":"tool"`, `"state":"pending"`)
	var a control.Approval
	json.Unmarshal(sheet, &a)
	shell.do("approve", fmt.Sprintf(`{"approval_id":%q,"decision":"allow","remember":true}`, a.ApprovalID))
	g.save("approve-remember", shell.take())
	kernel.event("tool.finished", `"call_id":"c3"`)
	g.save("tool.call-confirm-host", kernel.take())

	kernel.do("tool.call", call("c4", "notes.wait", `{}`, "write", "none"))
	kernel.event("tool.acknowledged", `"call_id":"c4"`)
	kernel.do("tool.cancel", `{"app":"notes","call_id":"c4"}`)
	g.save("tool.cancel", kernel.take())

	shell.do("rules", `{"action":"list"}`)
	g.save("rules", shell.take())
	shell.do("audit", `{"app":"notes"}`)
	g.save("audit", shell.take())
	shell.do("consent", `{"action":"list"}`)
	g.save("consent", shell.take())
	shell.do("app.send", `{"app":"notes","frame":{"ui":{"ping":1}}}`)
	shell.event("app.frame")
	g.save("app.send", shell.take())

	shell.do("logs", `{"app":"clock","lines":10}`)
	g.save("logs", shell.take())
	follower := rec.dial(t, path, "follower")
	follower.do("logs", `{"app":"clock","lines":1,"follow":true}`)
	var st control.StatusData
	if err := d.client.Do(ctx, control.OpStatus, control.StatusArgs{App: "clock"}, &st); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.Apps[0].Pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	follower.event("log", `"tick 1"`)
	g.save("logs-follow", follower.take())

	shell.do("debug", `{"gc":true}`)
	g.save("debug", shell.take())
	shell.do("jail", `{"app":"clock"}`)
	g.save("jail", shell.take())
	shell.do("stop", `{"app":"clock"}`)
	g.save("stop", shell.take())
	shell.do("start", `{"app":"clock"}`)
	g.save("start", shell.take())
	shell.do("restart", `{"app":"clock"}`)
	g.save("restart", shell.take())

	kernel.do("account.close", `{"app":"notes","account":"personal"}`)
	g.save("account.close", kernel.take())
	shell.do("reload", "")
	g.save("reload", shell.take())
	shell.do("consent", `{"action":"revoke","app":"notes"}`)
	g.save("consent-revoke", shell.take())

	// Refusals, on a connection of their own.
	errs := rec.dial(t, path, "errors")
	errs.send(`{"id":"7","op":"status"}`)
	errs.read()
	errs.doExpect("stat", "", false)
	errs.doExpect("status", `{"app":"nope"}`, false)
	errs.doExpect("subscribe", `{"topic":["state"]}`, false)
	errs.doExpect("request.reply", `{"app":"notes","req_id":"turn-1","ok":true}`, false)
	errs.doExpect("kernel.attach", "", false)
	errs.doExpect("approve", `{"approval_id":"nope","decision":"allow"}`, false)
	errs.doExpect("tool.call", `{"app":"notes","call":{"call_id":"c9","name":"notes.search","timeout_ms":1000,"context_id":"x","caller":"assistant"}}`, false)
	env.writeManifest(t, []byte(`{"version":1,"apps":[{"id":"clock"}]}`))
	errs.doExpect("reload", "", false)
	g.save("errors", errs.take())

	// The hub app's own lines, both ways.
	var hubLog control.LogsData
	if err := d.client.Do(ctx, control.OpLogs, control.LogsArgs{App: "notes", Lines: 1000}, &hubLog); err != nil {
		t.Fatal(err)
	}

	checkSession(t, schemas, rec, hubLog.Lines)
	checkGolden(t, g)
}

// checkSession validates every line of the session against the schemas.
func checkSession(t *testing.T, s *wireschema.Schemas, rec *wireRecord, hub []control.LogLine) {
	t.Helper()
	// The daemon and the schema agree on what is malformed: a request
	// answered bad_request or unknown_op must not fit the request schema,
	// every other must.
	type key struct {
		conn string
		id   int64
	}
	refused := map[key]bool{}
	for _, l := range rec.lines {
		var a struct {
			ID    *int64 `json:"id"`
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if !l.sent && json.Unmarshal(l.text, &a) == nil && a.ID != nil && a.Error != nil &&
			(a.Error.Code == control.CodeBadRequest || a.Error.Code == control.CodeUnknownOp) {
			refused[key{l.conn, *a.ID}] = true
		}
	}
	n := 0
	for _, l := range rec.lines {
		var err error
		switch {
		case l.sent:
			var r struct {
				ID json.RawMessage `json:"id"`
			}
			json.Unmarshal(l.text, &r)
			var id int64
			if json.Unmarshal(r.ID, &id) != nil || refused[key{l.conn, id}] {
				if s.Request(l.text) == nil {
					t.Errorf("%s: the daemon refused %s, but it fits the request schema", l.conn, l.text)
				}
				n++
				continue
			}
			err = s.Request(l.text)
		case l.op == "" && bytes.HasPrefix(l.text, []byte(`{"event":`)):
			err = s.Event(l.text)
		default:
			err = s.Answer(l.op, l.text)
		}
		if err != nil {
			t.Errorf("%s line does not fit its schema: %s\n%v", l.conn, l.text, err)
		}
		n++
	}
	hubLines := 0
	for _, l := range hub {
		dir, line, ok := strings.Cut(l.Text, " ")
		if !ok || (dir != "up" && dir != "down") {
			continue
		}
		check := s.Up
		if dir == "down" {
			check = s.Down
		}
		if err := check([]byte(line)); err != nil {
			t.Errorf("hub %s line does not fit its schema: %s\n%v", dir, line, err)
		}
		hubLines++
	}
	if n < 60 || hubLines < 12 {
		t.Errorf("the session checked %d control lines and %d hub lines: too few, the recording is broken", n, hubLines)
	}
	t.Logf("validated %d control lines and %d hub lines against configs/schema", n, hubLines)
}

// checkGolden compares the session's golden files with
// control/testdata/golden, or writes them there with -update.
func checkGolden(t *testing.T, g *goldenFiles) {
	t.Helper()
	if *updateGolden {
		if err := os.MkdirAll(controlGolden, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(controlGolden, "*.jsonl"))
		for _, f := range old {
			os.Remove(f)
		}
	}
	for _, name := range g.order {
		path := filepath.Join(controlGolden, name+".jsonl")
		got := strings.Join(g.files[name], "\n") + "\n"
		if *updateGolden {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("golden file %s: %v (go test ./daemon -run TestControlGolden -update writes it)", path, err)
			continue
		}
		if string(want) != got {
			t.Errorf("%s differs from the daemon's session (after normalizing):\n--- golden\n%s--- session\n%s(if the change is meant, -update rewrites it, and docs/control.md quotes it)", path, want, got)
		}
	}
}

var nonceRE = regexp.MustCompile(`\b[0-9a-f]{16}\b`)

// goldenNormalizer returns what makes a session's line the same on every
// run and machine: each time member is one instant, each pid one number,
// the daemon's nonce the one the docs use, the test's paths a user's
// usual ones, the jail layers those of a kernel with Landlock ABI 7, the
// limits and usage those of a daemon with a delegated cgroup, and
// the jail op's long spec and text cut to their first members and line.
func goldenNormalizer(env testEnv) func([]byte) []byte {
	// usageAsked: the line before was a status asking for usage. A
	// daemon without a cgroup (not root, no delegation) has no leaf to
	// read it from, and leaves it out.
	usageAsked := false
	var pairs []string
	for k, v := range map[string]string{
		"XDG_RUNTIME_DIR": "/run/user/1000",
		"XDG_STATE_HOME":  "/home/me/.local/state",
		"XDG_DATA_HOME":   "/home/me/.local/share",
		"XDG_CONFIG_HOME": "/home/me/.config",
		"HOME":            "/home/me",
	} {
		pairs = append(pairs, env.vars[k], v)
	}
	exe, _ := os.Executable()
	pairs = append(pairs, exe, "/usr/lib/octosup/examples/app")
	paths := strings.NewReplacer(pairs...)
	str := func(s string) string { return nonceRE.ReplaceAllString(paths.Replace(s), "5f2a9c1e7b3d4a60") }
	var walk func(key string, v json.RawMessage) []byte
	walk = func(key string, v json.RawMessage) []byte {
		switch key {
		case "since", "at", "created", "expires", "started", "ended":
			if len(v) > 0 && v[0] == '"' {
				return []byte(`"2026-12-01T20:00:00Z"`)
			}
		case "pid":
			return []byte(`4242`)
		case "duration_ms":
			return []byte(`1.5`)
		case "goroutines", "threads", "fds":
			return []byte(`12`)
		case "rss_bytes", "heap_bytes":
			return []byte(`25165824`)
		case "stopper":
			return []byte(`"cgroup"`) // "process-group" where the daemon has no cgroup to delegate
		case "jail":
			if bytes.Contains(v, []byte(`"landlock_abi"`)) {
				return []byte(`{"landlock_abi":7,"layers":["landlock","seccomp"],"missing":[]}`)
			}
		case "limits":
			if bytes.Contains(v, []byte(`"limiter"`)) {
				return []byte(`{"limiter":"cgroup","applied":["tasks_max=512"],"missing":[]}`)
			}
		case "usage":
			if len(v) == 0 || v[0] != '{' {
				break // status's args: "usage": true
			}
			return []byte(leafUsage)
		case "spec":
			return []byte(`{"app":"clock","…":"the whole spec: docs/jail.md"}`)
		case "text":
			var s string
			if json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "app ") {
				first, _, _ := strings.Cut(s, "\n")
				b, _ := json.Marshal(str(first) + "\n…")
				return b
			}
		}
		switch {
		case len(v) > 0 && v[0] == '{':
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.Token()
			var out bytes.Buffer
			out.WriteByte('{')
			var running, usage bool
			for dec.More() {
				tok, _ := dec.Token()
				k := tok.(string)
				var mv json.RawMessage
				dec.Decode(&mv)
				if out.Len() > 1 {
					out.WriteByte(',')
				}
				kb, _ := json.Marshal(k)
				out.Write(kb)
				out.WriteByte(':')
				out.Write(walk(k, mv))
				running = running || k == "state" && string(mv) == `"running"`
				usage = usage || k == "usage"
			}
			if usageAsked && key == "" && running && !usage {
				out.WriteString(`,"usage":` + leafUsage)
			}
			out.WriteByte('}')
			return out.Bytes()
		case len(v) > 0 && v[0] == '[':
			var items []json.RawMessage
			json.Unmarshal(v, &items)
			var out bytes.Buffer
			out.WriteByte('[')
			for i, it := range items {
				if i > 0 {
					out.WriteByte(',')
				}
				out.Write(walk("", it))
			}
			out.WriteByte(']')
			return out.Bytes()
		case len(v) > 0 && v[0] == '"':
			var s string
			json.Unmarshal(v, &s)
			var out bytes.Buffer
			enc := json.NewEncoder(&out)
			enc.SetEscapeHTML(false)
			enc.Encode(str(s))
			return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
		}
		return v
	}
	return func(line []byte) []byte {
		if !json.Valid(line) {
			return line
		}
		out := walk("", line)
		var req struct {
			Op   string
			Args struct{ Usage bool }
		}
		usageAsked = json.Unmarshal(line, &req) == nil && req.Op == "status" && req.Args.Usage
		return out
	}
}

// leafUsage is an app's usage as a daemon with a delegated cgroup reads
// it from the app's leaf.
const leafUsage = `{"cpu_usec":11531,"memory_current":16977920,"memory_peak":17039360,"tasks":5,"at":"2026-12-01T20:00:00Z"}`
