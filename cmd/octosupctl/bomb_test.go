package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/internal/asnobody"
)

// bombNotesEnv hands the notes app, built by root, to the run of
// TestForkBombContained as nobody.
const bombNotesEnv = "OCTOSUPCTL_TEST_NOTES"

// pidsInCgroup2 says whether this machine's cgroup v2 has the pids
// controller, which holds a fork bomb whoever runs it.
func pidsInCgroup2() bool {
	for _, f := range []string{"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/unified/cgroup.controllers"} {
		if b, err := os.ReadFile(f); err == nil && slices.Contains(strings.Fields(string(b)), "pids") {
			return true
		}
	}
	return false
}

// TestForkBombContained: a fork bomb in a processes: true app is held at
// its tasks_max (by the pids controller, or by RLIMIT_NPROC where there is
// none: then the test runs as nobody, since root is exempt from it),
// while status keeps answering in under 100 ms and another app's tool
// calls keep being answered. It logs status's latency, idle and during
// the bomb.
func TestForkBombContained(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	notes := os.Getenv(bombNotesEnv)
	if notes == "" {
		notes = buildNotes(t)
		if os.Geteuid() == 0 && !pidsInCgroup2() {
			rerunAsNobody(t, notes)
			return
		}
	}
	const tasksMax = 64
	manifest := filepath.Join(t.TempDir(), "apps.json")
	m := fmt.Sprintf(`{"version": 1, "apps": [{
	  "id": "notes", "exec": [%q], "autostart": true,
	  "grants": {"services": ["agent.octos"], "methods": ["octos.session.open"], "tools": ["notes.search"]},
	  "sandbox": {"policy": "broad", "accounts": ["personal"]},
	  "storage": {"jail": true}
	}, {
	  "id": "bomb", "exec": ["/bin/bash", "-c", "while :; do /bin/sleep 600 & done"],
	  "sandbox": {"policy": "jail", "processes": true},
	  "limits": {"tasks_max": %d}
	}]}`, notes, tasksMax)
	if err := os.WriteFile(manifest, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, _ := startDaemon(t, manifest)
	c := &control.Client{Path: socket}
	ctx := context.Background()
	s := []string{"--socket", socket}
	if r := ctl(t, append(s, "approve", waitApprovals(t, c, 1)[0].ApprovalID, "allow")...); r.code != exitOK {
		t.Fatalf("approve: %+v", r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
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
	}
	call := func(when string) {
		t.Helper()
		if r := ctl(t, append(s, "call", "notes", "notes.search", `{"query":"x"}`)...); r.code != exitOK || !strings.Contains(r.stdout, "notes.search: ok") {
			t.Fatalf("a tool call of notes %s: %+v", when, r)
		}
	}
	call("before the bomb")
	idle := statusLatency(t, c, 200)

	var sd control.StateData
	if err := c.Do(ctx, control.OpStart, control.AppArgs{App: "bomb"}, &sd); err != nil {
		t.Fatalf("start the bomb: %v", err)
	}
	limiter := sd.App.Limits.Limiter
	limit := tasksMax
	if limiter == "prlimit" {
		var lim unix.Rlimit
		if err := unix.Prlimit(sd.App.Pid, unix.RLIMIT_NPROC, nil, &lim); err != nil {
			t.Fatal(err)
		}
		limit = int(lim.Cur)
	} else if limiter != "cgroup" {
		t.Fatalf("the bomb's limits: %+v; want the cgroup or RLIMIT_NPROC holding it", sd.App.Limits)
	}
	// bash says so when a fork is refused, and goes on trying (sh would
	// give up: a refused fork is fatal to it).
	var logs control.LogsData
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := c.Do(ctx, control.OpLogs, control.LogsArgs{App: "bomb", Lines: 10}, &logs); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(logs.Lines, func(l control.LogLine) bool { return strings.Contains(l.Text, "fork") }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fork of the bomb was refused within 30s: %+v", logs.Lines)
		}
	}
	during := statusLatency(t, c, 200)
	for i := range 5 {
		call(fmt.Sprintf("during the bomb (%d)", i))
	}
	tasks := groupTasks(sd.App.Pid)
	if tasks > limit || tasks < tasksMax/2 {
		var st control.StatusData
		c.Do(ctx, control.OpStatus, control.StatusArgs{App: "bomb"}, &st)
		t.Fatalf("the bomb (pid %d) runs %d tasks, its limit is %d (%s); its last lines %+v; its status %+v", sd.App.Pid, tasks, limit, limiter, logs.Lines, st.Apps)
	}
	t.Logf("fork bomb held at %d tasks by %s (limit %d, tasks_max %d)", tasks, limiter, limit, tasksMax)
	t.Logf("status latency idle: p50 %s p99 %s; during the bomb: p50 %s p99 %s", idle.p50, idle.p99, during.p50, during.p99)
	if during.p99 >= 100*time.Millisecond {
		t.Errorf("status p99 %s during the bomb, want under 100ms", during.p99)
	}
	if r := ctl(t, append(s, "stop", "bomb")...); r.code != exitOK {
		t.Fatalf("stop the bomb: %+v", r)
	}
	if n := groupTasks(sd.App.Pid); n != 0 {
		t.Fatalf("%d tasks of the bomb left after its stop", n)
	}
}

type latency struct{ p50, p99 time.Duration }

// statusLatency times n status calls, one after the other, each on a
// connection of its own as octosupctl makes them.
func statusLatency(t *testing.T, c *control.Client, n int) latency {
	t.Helper()
	took := make([]time.Duration, n)
	for i := range took {
		t0 := time.Now()
		var st control.StatusData
		if err := c.Do(context.Background(), control.OpStatus, control.StatusArgs{}, &st); err != nil {
			t.Fatalf("status: %v", err)
		}
		took[i] = time.Since(t0)
	}
	slices.Sort(took)
	return latency{p50: took[n/2].Round(time.Microsecond), p99: took[n*99/100].Round(time.Microsecond)}
}

// groupTasks counts the tasks of the processes in the process group
// pgid, where the bomb's shell and its children are.
func groupTasks(pgid int) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: state, ppid, pgrp, …,
		// and num_threads is the 20th field of the line.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 17 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			threads, _ := strconv.Atoi(f[17])
			n += threads
		}
	}
	return n
}

// rerunAsNobody runs TestForkBombContained again as nobody, with the
// notes app root built.
func rerunAsNobody(t *testing.T, notes string) {
	dir := asnobody.NewDir(t)
	out := asnobody.RunIn(t, dir, "^TestForkBombContained$", bombNotesEnv+"="+asnobody.Copy(t, dir, notes, "notes"))
	asnobody.WantPassed(t, out, "TestForkBombContained")
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "held at") || strings.Contains(line, "latency") {
			t.Log("as nobody: " + strings.TrimSpace(line))
		}
	}
}
