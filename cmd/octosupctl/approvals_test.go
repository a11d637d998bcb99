package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"octosup/control"
)

// TestApprovals: an app's first request shows in watch and approvals,
// approve answers it, consent keeps it, revoke forgets it.
func TestApprovals(t *testing.T) {
	socket, _ := startDaemon(t, "testdata/asker.json")
	sock := []string{"--socket", socket}

	if r := ctl(t, append(sock, "approvals")...); r.code != exitOK || r.stdout != "no pending approvals\n" {
		t.Fatalf("approvals before any request: %+v", r)
	}
	watch, stopWatch := streaming(t, append(sock, "watch")...)
	waitLine(t, watch, `^\d\d:\d\d:\d\d asker stopped$`)
	if r := ctl(t, append(sock, "start", "asker")...); r.code != exitOK {
		t.Fatalf("start: %+v", r)
	}
	line := waitLine(t, watch, `^\d\d:\d\d:\d\d asker approval \S+ pending: use the agent service \(first request: octos.session.open\) \(octosupctl approve \S+ allow\|deny\)$`)
	id := regexp.MustCompile(`approval (\S+) pending`).FindStringSubmatch(line)[1]

	r := ctl(t, append(sock, "approvals")...)
	if r.code != exitOK || !regexp.MustCompile(`(?m)^ID +APP +KIND +ASKS +EXPIRES IN\n`+regexp.QuoteMeta(id)+` +asker +consent +use the agent service`).MatchString(r.stdout) {
		t.Fatalf("approvals: %+v", r)
	}
	var data control.ApprovalsData
	r = ctl(t, append(sock, "--json", "approvals")...)
	if err := json.Unmarshal([]byte(r.stdout), &data); err != nil || len(data.Approvals) != 1 || data.Approvals[0].ApprovalID != id {
		t.Fatalf("approvals --json: %v %+v", err, r)
	}

	if r := ctl(t, append(sock, "approve", id, "maybe")...); r.code != exitUsage {
		t.Errorf("approve with a bad decision: %+v", r)
	}
	// Said once, with what to do.
	if r := ctl(t, append(sock, "approve", "nope", "allow")...); r.code != exitFailed ||
		r.stderr != "octosupctl: approve nope: no pending approval with that id (octosupctl approvals lists the pending ones)\n" {
		t.Errorf("approve of an unknown id: %+v", r)
	}
	// Completion offers the pending ids in the id's place, then the
	// decisions.
	if r := ctl(t, append(sock, "__complete", "approve", "")...); r.code != exitOK ||
		!regexp.MustCompile(`^`+regexp.QuoteMeta(id)+`\tasker: use the agent service \(first request: octos.session.open\)\n:4\n`).MatchString(r.stdout) {
		t.Errorf("completion of approve's id: %+v", r)
	}
	if r := ctl(t, append(sock, "__complete", "approve", id, "")...); r.code != exitOK || !strings.HasPrefix(r.stdout, "allow\ndeny\n:4\n") {
		t.Errorf("completion of approve's decision: %+v", r)
	}
	if r := ctl(t, append(sock, "__complete", "approve", id, "allow", "")...); r.code != exitOK || !strings.HasPrefix(r.stdout, ":4\n") {
		t.Errorf("completion after approve's decision: %+v", r)
	}
	if r := ctl(t, append(sock, "approve", id, "allow")...); r.code != exitOK || r.stdout != id+": allow\n" {
		t.Fatalf("approve: %+v", r)
	}
	waitLine(t, watch, `^\d\d:\d\d:\d\d asker approval `+regexp.QuoteMeta(id)+` allowed: `)
	stopWatch()

	r = ctl(t, append(sock, "consent", "list")...)
	if r.code != exitOK || !regexp.MustCompile(`(?m)^APP +DECISION +SINCE\nasker +allow +\d{4}-`).MatchString(r.stdout) {
		t.Fatalf("consent list: %+v", r)
	}
	if r := ctl(t, append(sock, "consent", "revoke", "asker")...); r.code != exitOK || r.stdout != "asker: consent revoked; its next request asks again\n" {
		t.Fatalf("consent revoke: %+v", r)
	}
	if r := ctl(t, append(sock, "consent", "revoke", "asker")...); r.code != exitOK || r.stdout != "asker: no decision was kept\n" {
		t.Fatalf("consent revoke again: %+v", r)
	}
	if r := ctl(t, append(sock, "consent", "list")...); r.code != exitOK || r.stdout != "no consent decisions kept\n" {
		t.Fatalf("consent list after revoke: %+v", r)
	}
}
