package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"octosup/control"
)

// checkVisible fails unless out holds nothing a terminal would act on or
// hide: no control but the newlines that end octosupctl's own lines, no
// DEL, no C1 control, no bidi control or other invisible format
// character, valid UTF-8 only.
func checkVisible(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not UTF-8: %q", what, out)
	}
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.In(r, unicode.Bidi_Control, unicode.Cf, unicode.Zl, unicode.Zp) {
			t.Errorf("%s: output holds %U at byte %d: %q", what, r, i, truncate(out[max(0, i-40):]))
			return
		}
	}
}

// hostileScript is an app that writes what an adversarial review found
// reaching the person's terminal: an OSC title change, a CR and a line
// erase, a line that reads as another app's, bidi overrides and isolates,
// a byte that is not UTF-8, a C1 control, and the text of an escape
// spelled out. The shell's printf turns the octal escapes into bytes.
const hostileScript = `printf 'title \033]0;pwned\007 end\n'
printf 'cr \r over \033[2K end\n'
printf 'ok\n[otherapp] forged\n'
printf 'bidi \342\200\256 evil \342\201\246 iso \342\201\251 end\n'
printf 'bad \377 utf8 \302\205 c1\n'
printf 'spelled \\x1b[2K\n'
printf 'err \033[31mred\n' >&2
printf 'end-of-hostile\n'
exec sleep 600`

// hostileLogs is what the daemon records of hostileScript's output (the
// byte that is not UTF-8 becomes U+FFFD there, before any client sees
// it), and hostileShown how octosupctl shows each line to a person,
// after the time.
var (
	hostileLogs = []control.LogLine{
		{Stream: "stdout", Text: "title \x1b]0;pwned\x07 end"},
		{Stream: "stdout", Text: "cr \r over \x1b[2K end"},
		{Stream: "stdout", Text: "ok"},
		{Stream: "stdout", Text: "[otherapp] forged"},
		{Stream: "stdout", Text: "bidi \u202e evil \u2066 iso \u2069 end"},
		{Stream: "stdout", Text: "bad \uFFFD utf8 \u0085 c1"},
		{Stream: "stdout", Text: `spelled \x1b[2K`},
		{Stream: "stderr", Text: "err \x1b[31mred"},
		{Stream: "stdout", Text: "end-of-hostile"},
	}
	hostileShown = []string{
		`title \x1b]0;pwned\x07 end`,
		`cr \r over \x1b[2K end`,
		`ok`,
		`[otherapp] forged`,
		`bidi \u202e evil \u2066 iso \u2069 end`,
		"bad \uFFFD utf8 \\u0085 c1",
		`spelled \\x1b[2K`,
		`[stderr] err \x1b[31mred`,
		`end-of-hostile`,
	}
)

// hostileProgram is a program path an app's manifest entry may name:
// the failure to start it carries it into status and watch.
const hostileProgram = "/nonexistent/\x1b]0;pwned\x07\u202e/app"

// hostileEnv is an env value whose newline would print a jail line of its
// own, one that says the app has no network.
const hostileEnv = "x\n  tcp      connect none, bind none\x1b[2K"

func hostileManifest(t *testing.T) string {
	t.Helper()
	app := func(id string, exec []string, env map[string]string) map[string]any {
		return map[string]any{"id": id, "exec": exec, "env": env, "grants": map[string]any{}, "sandbox": map[string]any{"policy": "broad"}, "storage": map[string]any{}}
	}
	b, err := json.Marshal(map[string]any{"version": 1, "apps": []any{
		app("hostile", []string{"/bin/sh", "-c", hostileScript}, map[string]string{"NOTE": hostileEnv}),
		app("badexec", []string{hostileProgram}, map[string]string{}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var logTime = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} `)

// checkShown checks that lines are hostileShown, each after the time, in
// any order (stdout and stderr race).
func checkShown(t *testing.T, what string, lines []string) {
	t.Helper()
	checkVisible(t, what, strings.Join(lines, "\n"))
	var got []string
	for _, l := range lines {
		if !logTime.MatchString(l) {
			t.Errorf("%s: line %q does not start with the time", what, l)
			continue
		}
		got = append(got, logTime.ReplaceAllString(l, ""))
	}
	want := slices.Clone(hostileShown)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: lines after the time\n%q\nwant\n%q", what, got, want)
	}
}

// checkJSONLogs checks that lines are hostileLogs' JSON, text for text.
func checkJSONLogs(t *testing.T, what string, lines []string) {
	t.Helper()
	var got, want []string
	for _, l := range lines {
		var ll control.LogLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Errorf("%s: line %q: %v", what, l, err)
			continue
		}
		got = append(got, ll.Stream+" "+ll.Text)
	}
	for _, l := range hostileLogs {
		want = append(want, l.Stream+" "+l.Text)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: texts\n%q\nwant\n%q", what, got, want)
	}
}

// collect reads streamed lines until n came.
func collect(t *testing.T, lines <-chan string, n int) []string {
	t.Helper()
	var out []string
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended after %d lines, want %d: %q", len(out), n, out)
			}
			out = append(out, l)
		case <-timeout:
			t.Fatalf("%d lines within 10s, want %d: %q", len(out), n, out)
		}
	}
	return out
}

func splitLines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// TestHostileAppWithDaemon: a real app's hostile output, and a manifest's
// hostile program and env, reach the person visibly through logs, logs
// -f, status, start, watch and jail; --json keeps the text.
func TestHostileAppWithDaemon(t *testing.T) {
	socket, _ := startDaemon(t, hostileManifest(t))
	s := []string{"--socket", socket}

	// Every line comes as an event: the follows start before the app.
	follow, stopFollow := streaming(t, append(s, "logs", "-f", "hostile")...)
	jsonFollow, stopJSONFollow := streaming(t, append(s, "--json", "logs", "-f", "hostile")...)
	watch, stopWatch := streaming(t, append(s, "watch")...)
	waitLine(t, watch, `^\d\d:\d\d:\d\d hostile stopped$`)
	if r := ctl(t, append(s, "start", "hostile")...); r.code != exitOK {
		t.Fatalf("start: %+v", r)
	}
	checkShown(t, "logs -f", collect(t, follow, len(hostileShown)))
	checkJSONLogs(t, "--json logs -f", collect(t, jsonFollow, len(hostileLogs)))
	for _, stop := range []func() int{stopFollow, stopJSONFollow} {
		if code := stop(); code != exitOK {
			t.Errorf("logs -f exit %d after an interrupt", code)
		}
	}

	r := ctl(t, append(s, "logs", "hostile")...)
	if r.code != exitOK {
		t.Fatalf("logs: %+v", r)
	}
	checkShown(t, "logs", splitLines(r.stdout))
	r = ctl(t, append(s, "--json", "logs", "hostile")...)
	checkJSONLogs(t, "--json logs", splitLines(r.stdout))

	// The program's path comes back in the failure's reason.
	shownProgram := regexp.QuoteMeta(`/nonexistent/\x1b]0;pwned\x07\u202e/app`)
	r = ctl(t, append(s, "start", "badexec")...)
	checkVisible(t, "start stderr", r.stderr)
	if r.code != exitFailed || !regexp.MustCompile(`^octosupctl: start badexec: [^\n]*`+shownProgram+`[^\n]*\n$`).MatchString(r.stderr) {
		t.Errorf("start badexec: %+v", r)
	}
	line := waitLine(t, watch, `^\d\d:\d\d:\d\d badexec failed: `)
	checkVisible(t, "watch", line)
	if !regexp.MustCompile(shownProgram).MatchString(line) {
		t.Errorf("watch line %q does not show the program as %s", line, shownProgram)
	}
	if code := stopWatch(); code != exitOK {
		t.Errorf("watch exit %d after an interrupt", code)
	}
	r = ctl(t, append(s, "status")...)
	checkVisible(t, "status", r.stdout)
	if !regexp.MustCompile(`(?m)^badexec +failed +- +- +0 +- +- +[^\n]*` + shownProgram + `[^\n]*$`).MatchString(r.stdout) {
		t.Errorf("status:\n%s", r.stdout)
	}
	var st control.StatusData
	r = ctl(t, append(s, "--json", "status", "badexec")...)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Apps) != 1 || !strings.Contains(st.Apps[0].Reason, hostileProgram) {
		t.Errorf("--json status does not keep the program %q: %v %s", hostileProgram, err, r.stdout)
	}

	// jail: the env value stays on its line; --json keeps it.
	r = ctl(t, append(s, "jail", "hostile")...)
	checkVisible(t, "jail", r.stdout)
	if !strings.Contains(r.stdout, "\n    NOTE="+`x\n  tcp      connect none, bind none\x1b[2K`+"\n") {
		t.Errorf("jail does not show the env value on its line:\n%s", r.stdout)
	}
	if regexp.MustCompile(`(?m)^  tcp      connect none`).MatchString(r.stdout) {
		t.Errorf("jail prints a line of the env value's:\n%s", r.stdout)
	}
	var spec struct {
		Env []string `json:"env"`
	}
	r = ctl(t, append(s, "--json", "jail", "hostile")...)
	if err := json.Unmarshal([]byte(r.stdout), &spec); err != nil || !slices.Contains(spec.Env, "NOTE="+hostileEnv) {
		t.Errorf("--json jail does not keep the env value: %v %s", err, r.stdout)
	}
}

// What a daemon relays from a hostile app, and how octosupctl shows it:
// every escape of hostileShown is text, one line.
const (
	hostile      = "\x1b]0;pwned\x07 \r\x1b[2K\n12:00:00 otherapp running\t\u202eevil\u2069 \u0085 \x7f \\x1b"
	hostileShow  = `\x1b]0;pwned\x07 \r\x1b[2K\n12:00:00 otherapp running\t\u202eevil\u2069 \u0085 \x7f \\x1b`
	hostileTool  = "rm\x1b[2K\t-rf"
	hostileToolS = `rm\x1b[2K\t-rf`
	// hostileData is a tool's result as the app sent it: JSON, with a raw
	// bidi override and C1 control in a string.
	hostileData  = "{\"t\":\"\u202e\u0085\"}"
	hostileDataS = `{"t":"\u202e\u0085"}`
)

// hostileDaemon answers every op octosupctl uses with hostile text where
// a daemon relays an app's.
func hostileDaemon(t *testing.T) string {
	now := time.Now()
	status := control.StatusData{Apps: []control.AppStatus{{
		ID: "evil", State: "failed", Reason: hostile, Since: now,
		LastExit: &control.Exit{Code: 1, Signal: "KILL\r"},
	}}}
	pending := control.Approval{
		ApprovalID: "a1", App: "evil", Kind: "tool", State: "pending",
		Tool: hostileTool, Risk: "read", Args: hostile, Created: now, Expires: now.Add(5 * time.Minute),
	}
	consent := control.Approval{
		ApprovalID: "a2", App: "evil", Kind: "consent", State: "pending",
		Method: "octos.\u202esession", Created: now, Expires: now.Add(5 * time.Minute),
	}
	return fakeDaemon(t, func(op string, args json.RawMessage, subscribed bool) (any, *control.Error, []fakeEvent) {
		switch op {
		case control.OpStatus:
			return status, nil, nil
		case control.OpSubscribe:
			return control.SubscribeData{Topics: []string{control.TopicState, control.TopicApproval}}, nil, nil
		case control.OpApprovals:
			var events []fakeEvent
			if subscribed {
				events = []fakeEvent{
					{control.TopicState, control.StateEvent{App: "evil", State: "starting", Since: now}},
					{control.TopicState, control.StateEvent{App: "evil", State: "failed", Since: now, Reason: hostile}},
					{control.TopicApproval, pending},
				}
			}
			return control.ApprovalsData{Approvals: []control.Approval{pending, consent}}, nil, events
		case control.OpLogs:
			return control.LogsData{Lines: []control.LogLine{
				{App: "evil", Stream: "stdout", Text: "ok\n12:00:00.000 [otherapp] forged", At: now},
				{App: "evil", Stream: "stderr", Text: hostile, At: now},
			}}, nil, nil
		case control.OpStart:
			return nil, &control.Error{Code: control.CodeFailed, Message: hostile}, nil
		case control.OpStop:
			return control.StateData{State: "stopped", App: control.AppStatus{ID: "evil", State: "stopped", LastExit: &control.Exit{Signal: "TERM\x1b[2K"}}}, nil, nil
		case control.OpReload:
			return nil, &control.Error{Code: control.CodeInvalidManifest, Message: "invalid", Data: mustJSON(t, control.ManifestProblems{Problems: []string{hostile}})}, nil
		case control.OpApprove:
			return control.ApproveData{Decision: "allow\r"}, nil, nil
		case control.OpConsent:
			return control.ConsentData{Consents: []control.Consent{{App: "evil", Decision: "allow\x1b[2K", At: now}}}, nil, nil
		case control.OpRules:
			return control.RulesData{Rules: []control.Rule{{App: "evil", Tool: hostileTool, Decision: "allow", At: now}}}, nil, nil
		case control.OpAudit:
			return control.AuditData{Entries: []control.AuditEntry{{
				Seq: 1, App: "evil", Tool: hostileTool, Risk: "read", Decision: "none", Outcome: "error", Error: hostile, Started: now, DurationMS: 1,
			}}}, nil, nil
		case control.OpKernelAttach:
			return control.AttachData{Attached: true}, nil, nil
		case control.OpContextList:
			return control.ContextsData{Contexts: []control.ContextInfo{{ContextID: "c1"}}}, nil, nil
		case control.OpToolCall:
			var a control.ToolCallArgs
			if err := json.Unmarshal(args, &a); err != nil {
				t.Errorf("fake tool.call: %v", err)
			}
			id := a.Call.CallID
			return control.ToolCallData{CallID: id, Accepted: true}, nil, []fakeEvent{
				{control.EventToolAcknowledged, control.ToolEvent{App: "evil", CallID: id}},
				{control.EventToolFinished, control.ToolEvent{App: "evil", CallID: id, Outcome: control.OutcomeError,
					Error: &control.Error{Code: hostileTool, Message: hostile}, Data: json.RawMessage(hostileData)}},
			}
		}
		return nil, &control.Error{Code: control.CodeUnknownOp, Message: op}, nil
	})
}

// TestHostileTextFromDaemon: every command shows what a daemon relays
// from an app (failure reasons, approvals, tool names, args, results and
// errors, log lines with a newline in them, manifest problems) visibly,
// one line where it was one line; --json keeps the text.
func TestHostileTextFromDaemon(t *testing.T) {
	s := []string{"--socket", hostileDaemon(t)}
	q := regexp.QuoteMeta
	jsonHas := func(want string, get func(out string) (string, error)) func(*testing.T, string) {
		return func(t *testing.T, out string) {
			got, err := get(out)
			if err != nil || got != want {
				t.Errorf("--json gives %q (%v), want %q", got, err, want)
			}
		}
	}
	steps := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // regexp
		wantStderr string // regexp
		check      func(*testing.T, string)
	}{
		{"status", []string{"status"}, exitOK,
			`^APP +STATE +PID +UPTIME +RESTARTS +LAST EXIT +JAIL +REASON\nevil +failed +- +- +0 +signal KILL\\r +- +` + q(hostileShow) + `\n$`, `^$`, nil},
		{"status json", []string{"--json", "status"}, exitOK, `"reason"`, `^$`, jsonHas(hostile, func(out string) (string, error) {
			var d control.StatusData
			err := json.Unmarshal([]byte(out), &d)
			if err != nil || len(d.Apps) != 1 {
				return "", err
			}
			return d.Apps[0].Reason, nil
		})},
		{"approvals", []string{"approvals"}, exitOK,
			`^ID +APP +KIND +ASKS +EXPIRES IN\n` +
				`a1 +evil +tool +run ` + q(hostileToolS) + ` \(read\) ` + q(hostileShow) + ` +4m5\ds\n` +
				`a2 +evil +consent +use the agent service \(first request: octos\.\\u202esession\) +4m5\ds\n` +
				`answer with: [^\n]*\n$`, `^$`, nil},
		{"approvals json", []string{"--json", "approvals"}, exitOK, `"args"`, `^$`, jsonHas(hostileTool+" "+hostile, func(out string) (string, error) {
			var d control.ApprovalsData
			err := json.Unmarshal([]byte(out), &d)
			if err != nil || len(d.Approvals) == 0 {
				return "", err
			}
			return d.Approvals[0].Tool + " " + d.Approvals[0].Args, nil
		})},
		{"logs", []string{"logs", "evil"}, exitOK,
			`^\d\d:\d\d:\d\d\.\d{3} ok\\n12:00:00\.000 \[otherapp\] forged\n\d\d:\d\d:\d\d\.\d{3} \[stderr\] ` + q(hostileShow) + `\n$`, `^$`, nil},
		{"logs json", []string{"--json", "logs", "evil"}, exitOK, `"text"`, `^$`, jsonHas("ok\n12:00:00.000 [otherapp] forged|"+hostile, func(out string) (string, error) {
			var texts []string
			for _, l := range splitLines(out) {
				var ll control.LogLine
				if err := json.Unmarshal([]byte(l), &ll); err != nil {
					return "", err
				}
				texts = append(texts, ll.Text)
			}
			return strings.Join(texts, "|"), nil
		})},
		{"start error", []string{"start", "evil"}, exitFailed, `^$`, `^octosupctl: start evil: ` + q(hostileShow) + `\n$`, nil},
		{"stop", []string{"stop", "evil"}, exitOK, `^evil: stopped \(signal TERM\\x1b\[2K\)\n$`, `^$`, nil},
		{"reload problems", []string{"reload"}, exitInvalid, `^$`, `^octosupctl: reload refused: the manifest has 1 problem\(s\); the running apps are unchanged\n  ` + q(hostileShow) + `\n$`, nil},
		{"approve", []string{"approve", "a1", "allow"}, exitOK, `^a1: allow\\r\n$`, `^$`, nil},
		{"consent list", []string{"consent", "list"}, exitOK, `^APP +DECISION +SINCE\nevil +allow\\x1b\[2K +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n$`, `^$`, nil},
		{"rules", []string{"rules"}, exitOK, `^APP +TOOL +DECISION +SINCE\nevil +` + q(hostileToolS) + ` +allow +\d{4}-`, `^$`, nil},
		{"rules revoke", []string{"rules", "revoke", "evil"}, exitOK, `^revoked: evil ` + q(hostileToolS) + ` \(allow\)\n$`, `^$`, nil},
		{"audit", []string{"audit"}, exitOK,
			`^TIME +APP +TOOL +RISK +DECISION +OUTCOME +DURATION\n\S+ \S+ +evil +` + q(hostileToolS) + ` +read +none +error ` + q(hostileShow) + ` +1ms\n$`, `^$`, nil},
		{"audit json", []string{"--json", "audit"}, exitOK, `"entries"`, `^$`, jsonHas(hostileTool+" "+hostile, func(out string) (string, error) {
			var d control.AuditData
			err := json.Unmarshal([]byte(out), &d)
			if err != nil || len(d.Entries) != 1 {
				return "", err
			}
			return d.Entries[0].Tool + " " + d.Entries[0].Error, nil
		})},
		{"call", []string{"call", "evil", "tool", `{}`}, exitFailed,
			`^tool: accepted \(call octosupctl-\d+\)\ntool: acknowledged\n$`,
			`^octosupctl: call evil tool: error \(` + q(hostileToolS) + `: ` + q(hostileShow) + `\) ` + q(hostileDataS) + `\n$`, nil},
		{"call json", []string{"--json", "call", "evil", "tool", `{}`}, exitFailed, `"step":"finished"`, ``, jsonHas(hostile+" "+hostileData, func(out string) (string, error) {
			var ev struct {
				control.ToolEvent
				Step string `json:"step"`
			}
			lines := splitLines(out)
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev); err != nil || ev.Error == nil {
				return "", err
			}
			return ev.Error.Message + " " + string(ev.Data), nil
		})},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := ctl(t, append(s, st.args...)...)
			if r.code != st.wantCode {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", r.code, st.wantCode, r.stdout, r.stderr)
			}
			if st.check != nil {
				st.check(t, r.stdout)
			} else {
				checkVisible(t, "stdout", r.stdout)
				checkVisible(t, "stderr", r.stderr)
			}
			if !regexp.MustCompile(st.wantStdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", r.stdout, st.wantStdout)
			}
			if !regexp.MustCompile(st.wantStderr).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, st.wantStderr)
			}
		})
	}

	// watch: the state and approvals of now, then the events.
	watch, stop := streaming(t, append(s, "watch")...)
	lines := collect(t, watch, 6)
	if code := stop(); code != exitOK {
		t.Errorf("watch exit %d after an interrupt", code)
	}
	checkVisible(t, "watch", strings.Join(lines, "\n"))
	for i, re := range []string{
		`^\d\d:\d\d:\d\d evil failed: ` + q(hostileShow) + `$`,
		`^\d\d:\d\d:\d\d evil approval a1 pending: run ` + q(hostileToolS) + ` \(read\) ` + q(hostileShow) + ` \(octosupctl approve a1 allow\|deny\)$`,
		`^\d\d:\d\d:\d\d evil approval a2 pending: use the agent service \(first request: octos\.\\u202esession\) `,
		`^\d\d:\d\d:\d\d evil starting$`,
		`^\d\d:\d\d:\d\d evil failed: ` + q(hostileShow) + `$`,
		`^\d\d:\d\d:\d\d evil approval a1 pending: run ` + q(hostileToolS) + ` `,
	} {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("watch line %d %q does not match %q", i, lines[i], re)
		}
	}
	jw, stopJW := streaming(t, append(s, "--json", "watch")...)
	jl := collect(t, jw, 6)
	stopJW()
	var ev control.StateEvent
	var ap control.Approval
	if err := json.Unmarshal([]byte(jl[4]), &ev); err != nil || ev.Reason != hostile {
		t.Errorf("--json watch state %q: %v", jl[4], err)
	}
	if err := json.Unmarshal([]byte(jl[5]), &ap); err != nil || ap.Tool != hostileTool || ap.Args != hostile {
		t.Errorf("--json watch approval %q: %v", jl[5], err)
	}
}
