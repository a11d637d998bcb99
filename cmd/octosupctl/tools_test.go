package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"octosup/control"
)

// buildNotes builds the demo app of examples/notes, the app these tests
// call tools of.
func buildNotes(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	bin := filepath.Join(t.TempDir(), "notes")
	out, err := exec.Command(gobin, "build", "-o", bin, "octosup/examples/notes").CombinedOutput()
	if err != nil {
		t.Fatalf("build examples/notes: %v\n%s", err, out)
	}
	return bin
}

func TestToolCommandsWithDaemon(t *testing.T) {
	notes := buildNotes(t)
	manifest := filepath.Join(t.TempDir(), "apps.json")
	m := fmt.Sprintf(`{"version": 1, "apps": [{
	  "id": "notes", "exec": [%q], "autostart": true,
	  "grants": {"services": ["agent.octos"], "methods": ["octos.session.open"], "tools": ["notes.search", "notes.append"]},
	  "sandbox": {"policy": "broad", "accounts": ["personal"]},
	  "storage": {"jail": true}
	}]}`, notes)
	if err := os.WriteFile(manifest, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, _ := startDaemon(t, manifest)
	c := &control.Client{Path: socket}
	ctx := context.Background()
	var link control.LinkData
	if err := c.Do(ctx, control.OpLinkHas, control.AppArgs{App: "notes"}, &link); err != nil {
		t.Fatal(err)
	}

	// The app opens a session at start: answer its consent prompt, then
	// wait for its context.
	s := []string{"--socket", socket}
	consent := waitApprovals(t, c, 1)[0]
	if r := ctl(t, append(s, "approve", consent.ApprovalID, "allow")...); r.code != exitOK {
		t.Fatalf("approve: %+v", r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var data control.ContextsData
		if err := c.Do(ctx, control.OpContextList, control.AppArgs{App: "notes"}, &data); err != nil {
			t.Fatal(err)
		}
		if len(data.Contexts) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the notes app opened no context")
		}
		time.Sleep(10 * time.Millisecond)
	}

	steps := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // regexp
		wantStderr string // regexp
	}{
		{"append confirm app", []string{"call", "notes", "notes.append", `{"text":"buy milk"}`, "--risk", "write", "--confirm", "app"}, exitOK,
			`^notes.append: accepted \(call octosupctl-\d+\)\nnotes.append: acknowledged\nnotes.append: ok \{"line":1\}\n$`, `^$`},
		{"search", []string{"call", "notes", "notes.search", `{"query":"MILK"}`}, exitOK,
			`^notes.search: accepted \(call octosupctl-\d+\)\nnotes.search: acknowledged\nnotes.search: ok \{"matches":\[\{"line":1,"text":"buy milk"\}\]\}\n$`, `^$`},
		{"search json", []string{"--json", "call", "notes", "notes.search", `{"query":"none"}`}, exitOK,
			`^\{"step":"accepted","app":"notes","call_id":"octosupctl-\d+"\}\n\{"step":"acknowledged",[^\n]*\}\n\{"step":"finished",[^\n]*"outcome":"ok","data":\{"matches":\[\]\}\}\n$`, `^$`},
		{"append skips confirmation", []string{"call", "notes", "notes.append", `{"text":"x"}`, "--risk", "write"}, exitOK,
			`notes.append: ok \{"line":2\}\n$`, `^$`},
		// A failed outcome is said once, on stderr.
		{"app error", []string{"call", "notes", "notes.append", `{"text":""}`}, exitFailed,
			`^notes.append: accepted \(call octosupctl-\d+\)\nnotes.append: acknowledged\n$`,
			`^octosupctl: call notes notes.append: error \(bad_frame: notes.append takes [^\n]*: "text" must be one line, not empty\)\n$`},
		// The README's example once passed "q": the app says it takes
		// "query".
		{"unknown argument", []string{"call", "notes", "notes.search", `{"q":"milk"}`}, exitFailed,
			`^notes.search: accepted \(call octosupctl-\d+\)\nnotes.search: acknowledged\n$`,
			`^octosupctl: call notes notes.search: error \(bad_frame: notes.search takes \{"query": "milk", "delay_ms"\?: 5000\}: unknown argument "q"\)\n$`},
		{"timeout", []string{"call", "notes", "notes.search", `{"delay_ms":60000}`, "--timeout", "500ms"}, exitFailed,
			`^notes.search: accepted \(call octosupctl-\d+\)\nnotes.search: acknowledged\n$`,
			`^octosupctl: call notes notes.search: error \(timeout: the app did not answer the call within its timeout\)\n$`},
		{"timeout json", []string{"--json", "call", "notes", "notes.search", `{"delay_ms":60000}`, "--timeout", "500ms"}, exitFailed,
			`\n\{"step":"finished",[^\n]*"outcome":"error","error":\{"code":"timeout","message":"the app did not answer the call within its timeout"\}\}\n$`,
			`^octosupctl: call notes notes.search: error \(timeout: [^\n]*\)\n$`},
		{"not granted", []string{"call", "notes", "notes.delete", `{}`}, exitFailed, `^$`, `^octosupctl: call notes notes.delete: notes.delete is not in the app's grants.tools: add it to the manifest entry to let the app receive it\n$`},
		{"bad timeout", []string{"call", "notes", "notes.search", `{}`, "--timeout", "0s"}, exitUsage, `^$`, `--timeout must be at least 1ms`},
		{"args not an object", []string{"call", "notes", "notes.search", `[1]`}, exitUsage, `^$`, `must be one JSON object`},
		{"no such account", []string{"call", "notes", "notes.search", `{}`, "--account", "work"}, exitFailed, `^$`, `no open context with account "work"`},
		{"no rules", []string{"rules"}, exitOK, `^no standing rules`, `^$`},
		{"revoke none", []string{"rules", "revoke", "notes", "notes.append"}, exitFailed, `^$`, `no such standing rule`},
		{"audit", []string{"audit", "notes"}, exitOK,
			`(?s)^TIME\s+APP\s+TOOL\s+RISK\s+DECISION\s+OUTCOME\s+DURATION\n[^\n]*notes\s+notes.append\s+write\s+none\s+ok\s+[0-9.]+[µm]?s\n.*notes.append\s+read\s+none\s+error bad_frame`, `^$`},
		{"audit json", []string{"--json", "audit", "-n", "1"}, exitOK, `(?s)"entries": \[\n    \{\n      "seq": 8,.*"outcome": "error"`, `^$`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := ctl(t, append(s, st.args...)...)
			if r.code != st.wantCode {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", r.code, st.wantCode, r.stdout, r.stderr)
			}
			if !regexp.MustCompile(st.wantStdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", r.stdout, st.wantStdout)
			}
			if !regexp.MustCompile(st.wantStderr).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, st.wantStderr)
			}
		})
	}

	// confirm host: the person approves with --remember, which makes a
	// standing rule; the next call needs no sheet.
	done := make(chan result, 1)
	go func() {
		done <- ctl(t, append(s, "call", "notes", "notes.search", `{"query":"milk"}`, "--confirm", "host")...)
	}()
	sheet := waitApprovals(t, c, 1)[0]
	if sheet.Kind != "tool" || sheet.Tool != "notes.search" || sheet.Risk != "read" || sheet.Args != `{"query":"milk"}` {
		t.Fatalf("sheet %+v", sheet)
	}
	if r := ctl(t, append(s, "approve", sheet.ApprovalID, "allow", "--remember")...); r.code != exitOK {
		t.Fatalf("approve: %+v", r)
	}
	if r := <-done; r.code != exitOK || !regexp.MustCompile(`(?s)acknowledged\n.*approve ID.*\nnotes.search: ok`).MatchString(r.stdout) {
		t.Fatalf("host call: %+v", r)
	}
	if r := ctl(t, append(s, "call", "notes", "notes.search", `{"query":"milk"}`, "--confirm", "host")...); r.code != exitOK {
		t.Fatalf("call under the rule: %+v", r)
	}
	if r := ctl(t, append(s, "rules")...); !regexp.MustCompile(`(?m)^notes\s+notes.search\s+allow\s+\d{4}-`).MatchString(r.stdout) {
		t.Fatalf("rules: %+v", r)
	}
	if r := ctl(t, append(s, "audit", "notes", "-n", "2")...); !regexp.MustCompile(`(?s)sheet allow\s+ok.*\n.*rule allow\s+ok`).MatchString(r.stdout) {
		t.Fatalf("audit: %+v", r)
	}
	if r := ctl(t, append(s, "rules", "revoke", "notes")...); r.code != exitOK || r.stdout != "revoked: notes notes.search (allow)\n" {
		t.Fatalf("revoke: %+v", r)
	}
	// A standing deny: the call's error names the command that undoes it.
	go func() {
		done <- ctl(t, append(s, "call", "notes", "notes.search", `{"query":"milk"}`, "--confirm", "host")...)
	}()
	sheet = waitApprovals(t, c, 1)[0]
	if r := ctl(t, append(s, "approve", sheet.ApprovalID, "deny", "--remember")...); r.code != exitOK {
		t.Fatalf("approve deny: %+v", r)
	}
	<-done
	if r := ctl(t, append(s, "call", "notes", "notes.search", `{"query":"milk"}`, "--confirm", "host")...); r.code != exitFailed ||
		!regexp.MustCompile("^octosupctl: call notes notes.search: error \\(declined: [^\n]*`octosupctl rules revoke notes notes.search` asks again\\)+\n$").MatchString(r.stderr) {
		t.Fatalf("call under a deny rule: %+v", r)
	}
	if r := ctl(t, append(s, "rules", "revoke", "notes")...); r.code != exitOK || r.stdout != "revoked: notes notes.search (deny)\n" {
		t.Fatalf("revoke the deny rule: %+v", r)
	}
	// Ctrl-C while the sheet is open cancels the call: the outcome is
	// printed, the sheet withdrawn.
	ictx, interrupt := context.WithCancel(ctx)
	interrupted := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(ictx, append(s, "call", "notes", "notes.append", `{"text":"y"}`, "--risk", "write", "--confirm", "host"), &out, &errOut)
		interrupted <- result{code, out.String(), errOut.String()}
	}()
	waitApprovals(t, c, 1)
	interrupt()
	if r := <-interrupted; r.code != exitFailed || r.stderr != "octosupctl: call notes notes.append: error (cancelled: the caller cancelled the call)\n" {
		t.Fatalf("interrupted call: %+v", r)
	}
	waitApprovals(t, c, 0)

	var rules control.RulesData
	if err := c.Do(ctx, control.OpRules, control.RulesArgs{}, &rules); err != nil || len(rules.Rules) != 0 {
		t.Fatalf("rules after revoke: %+v %v", rules, err)
	}
	raw, _ := json.Marshal(rules)
	if string(raw) != `{"rules":[]}` {
		t.Fatalf("rules json %s", raw)
	}
}

// waitApprovals polls (bounded) until n approvals are pending: the test
// holds no subscription to be told.
func waitApprovals(t *testing.T, c *control.Client, n int) []control.Approval {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var data control.ApprovalsData
		if err := c.Do(context.Background(), control.OpApprovals, struct{}{}, &data); err != nil {
			t.Fatal(err)
		}
		if len(data.Approvals) == n {
			return data.Approvals
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d approvals pending, want %d", len(data.Approvals), n)
		}
	}
}

// TestConsentDeniedHint: after approve ... deny, the notes app says how
// to be asked again; doing what it says, to the letter, asks again.
func TestConsentDeniedHint(t *testing.T) {
	notes := buildNotes(t)
	manifest := filepath.Join(t.TempDir(), "apps.json")
	m := fmt.Sprintf(`{"version": 1, "apps": [{
	  "id": "notes", "exec": [%q], "autostart": true,
	  "grants": {"services": ["agent.octos"], "methods": ["octos.session.open"]},
	  "sandbox": {"policy": "broad", "accounts": ["personal"]},
	  "storage": {"jail": true}
	}]}`, notes)
	if err := os.WriteFile(manifest, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, _ := startDaemon(t, manifest)
	c := &control.Client{Path: socket}
	s := []string{"--socket", socket}
	logs, stopLogs := streaming(t, append(s, "logs", "-f", "notes")...)
	defer stopLogs()

	consent := waitApprovals(t, c, 1)[0]
	if r := ctl(t, append(s, "approve", consent.ApprovalID, "deny")...); r.code != exitOK {
		t.Fatalf("approve deny: %+v", r)
	}
	hint := waitLine(t, logs, `^\S+ the agent service was denied`)
	cmds := regexp.MustCompile("`(octosupctl [^`]+)`").FindAllStringSubmatch(hint, -1)
	if len(cmds) == 0 {
		t.Fatalf("the hint %q names no command", hint)
	}
	for _, cmd := range cmds {
		if r := ctl(t, append(s, strings.Fields(cmd[1])[1:]...)...); r.code != exitOK {
			t.Fatalf("%s: %+v", cmd[1], r)
		}
	}
	again := waitApprovals(t, c, 1)[0]
	if again.App != "notes" || again.Kind != "consent" || again.ApprovalID == consent.ApprovalID {
		t.Fatalf("after %q: approval %+v, want a new consent question", hint, again)
	}
}

// TestRefusalHint: the daemon says what was refused in protocol terms;
// octosupctl adds the command that undoes it, once.
func TestRefusalHint(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        control.Error
		tool       string
		ruleDenies bool
		want       string
	}{
		{"consent denied", control.Error{Code: control.CodeConsentDenied, Message: "the person denied app notes the agent service"}, "", false,
			"; after `octosupctl consent revoke notes`, the app's next request asks again"},
		{"declined by a rule", control.Error{Code: control.CodeDeclined, Message: "a standing rule denies notes.search for app notes"}, "notes.search", true,
			"; `octosupctl rules revoke notes notes.search` asks again"},
		{"declined by the person", control.Error{Code: control.CodeDeclined, Message: "the person declined"}, "notes.search", false, ""},
		{"hint in the message already", control.Error{Code: control.CodeConsentDenied, Message: "after `octosupctl consent revoke notes`, asks again"}, "", false, ""},
		{"other code", control.Error{Code: "timeout", Message: "late"}, "notes.search", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusalHint(&tc.err, "notes", tc.tool, func() bool { return tc.ruleDenies }); got != tc.want {
				t.Errorf("hint %q, want %q", got, tc.want)
			}
		})
	}
}
