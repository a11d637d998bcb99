package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// garbage is n bytes that are no bbolt page.
func garbage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + 7)
	}
	return b
}

// storeStatus is status's store member.
func storeStatus(t *testing.T, c *control.Client) *control.StoreStatus {
	t.Helper()
	var d control.StatusData
	if err := c.Do(context.Background(), control.OpStatus, nil, &d); err != nil {
		t.Fatalf("status: %v", err)
	}
	if d.Store == nil {
		t.Fatal("status has no store member")
	}
	return d.Store
}

// TestDamagedStateFileStillStartsTheApps: with 8 KiB of garbage over
// state.db's header the daemon starts and runs its apps (it used to exit
// with "open the state store: invalid database", a restart loop under
// Restart=on-failure). The file is moved aside and kept; the log, status
// and STATUS= say so; with no good copy the store starts empty. The next
// start finds a healthy store.
func TestDamagedStateFileStillStartsTheApps(t *testing.T) {
	env := newTestEnv(t)
	env.installManifest(t, "two-apps.json")
	if err := os.MkdirAll(env.dirs.State, 0o700); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(env.dirs.State, policy.StoreFile)
	if err := os.WriteFile(statePath, garbage(8<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logged := observer.New(zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))

	d := startDaemonLogging(t, env, log)
	if st := status(t, d.client); st["talker"].State != "running" {
		t.Fatalf("status: %+v, want talker running", st)
	}
	store := storeStatus(t, d.client)
	moved := regexp.QuoteMeta(statePath+policy.CorruptSuffix) + `\d{8}T\d{6}Z`
	if store.Healthy || store.Damage == nil || store.Damage.Problem != "invalid database" || !regexp.MustCompile(`^`+moved+`$`).MatchString(store.Damage.MovedTo) ||
		store.Restored == nil || store.Restored.From != "" || store.Path != statePath {
		t.Fatalf("status's store: %+v", store)
	}
	if kept, err := os.ReadFile(store.Damage.MovedTo); err != nil || !bytes.Equal(kept, garbage(8<<10)) {
		t.Fatalf("the damaged file is not kept as it was: %v", err)
	}
	wantNotes := []string{
		"state.db was damaged (invalid database): moved to " + store.Damage.MovedTo,
		"started empty: nothing is granted, each app's consent is asked again (no good copy: there is no state.db.good)",
	}
	if fmt.Sprintf("%q", store.Notes) != fmt.Sprintf("%q", wantNotes) {
		t.Fatalf("status's store notes %q, want %q", store.Notes, wantNotes)
	}

	if got, want := d.ready, "READY=1\nSTATUS=2 apps: 1 running, 1 stopped; store: "+strings.Join(wantNotes, "; "); got != want {
		t.Fatalf("first datagram %q, want %q", got, want)
	}
	entries := logged.FilterMessageSnippet("the state store was not usable").All()
	if len(entries) != 1 || entries[0].Level != zapcore.ErrorLevel || !strings.Contains(fmt.Sprint(entries[0].ContextMap()["notes"]), "moved to "+store.Damage.MovedTo) {
		t.Fatalf("logged %+v, want one error with the notes", entries)
	}

	if err := d.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	d2 := startDaemon(t, env)
	if again := storeStatus(t, d2.client); !again.Healthy || len(again.Notes) != 0 || again.Damage != nil {
		t.Fatalf("the store after a second start: %+v", again)
	}
}

// TestDamagedStateFileRestoresConsent: a consent given before the state
// file was damaged is in the good copy, which the next start restores: the
// app is served without being asked again.
func TestDamagedStateFileRestoresConsent(t *testing.T) {
	env, d, sub := hubDaemon(t, hubAppManifest)
	allow(t, d.client, pendingConsent(t, d.client, sub, "chat"))
	if err := d.stop(); err != nil {
		t.Fatalf("stop the first daemon: %v", err)
	}
	statePath := filepath.Join(env.dirs.State, policy.StoreFile)
	f, err := os.OpenFile(statePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(garbage(8<<10), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	d2 := startDaemon(t, env)
	logs := followLogs(t, d2.client, "chat")
	appSaw(t, logs, `"req_id":"turn-1"`, `no_kernel`) // served without asking
	var list control.ApprovalsData
	if err := d2.client.Do(context.Background(), control.OpApprovals, nil, &list); err != nil || len(list.Approvals) != 0 {
		t.Fatalf("approvals after the restore: %v %+v", err, list)
	}
	store := storeStatus(t, d2.client)
	if store.Damage == nil || store.Damage.MovedTo == "" || store.Restored == nil || store.Restored.From != statePath+policy.GoodCopySuffix ||
		len(store.Notes) != 2 || !strings.HasPrefix(store.Notes[1], "restored from the good copy of ") {
		t.Fatalf("status's store: %+v", store)
	}
}

// TestFullDiskDropsAuditNotCalls: with the state file on a full file
// system (a small tmpfs: root only) tool calls go on and reach their
// outcome; the audit entries that cannot be written are counted, and
// status says so.
func TestFullDiskDropsAuditNotCalls(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	// No batch is written on a timer (a loaded machine's calls outlast
	// the default's 50 ms): the audit op's flush writes all of them.
	rig := newToolRigIn(t, dir, func(c *peer.Config) { c.AuditInterval = time.Hour }, nil)
	k := rig.kernel()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	f.Close()

	// More entries than the free pages bbolt may still have inside its
	// file hold: their batch must grow the file.
	const calls = 500
	for i := range calls {
		k.send(fmt.Sprintf(`{"id":%d,"op":"tool.call","args":{"app":"notes","call":{"call_id":"c%d","name":"notes.search","args":{},"risk":"read","confirm":"none","timeout_ms":5000,"context_id":%q,"caller":"assistant"}}}`, 10+i, i, rig.ctx))
		k.expectLine(fmt.Sprintf(`{"id":%d,"ok":true,"data":{"call_id":"c%d","accepted":true}}`, 10+i, i))
		k.expectLine(fmt.Sprintf(`{"event":"tool.acknowledged","app":"notes","call_id":"c%d"}`, i))
		rig.appNext()
		rig.appWrite(&hubToolResult{CallID: fmt.Sprint("c", i), OK: true})
		k.expectLine(fmt.Sprintf(`{"event":"tool.finished","app":"notes","call_id":"c%d","outcome":"ok"}`, i))
	}
	// The audit op writes what is waiting first: that write fails too.
	if err := rig.ts.client.Do(t.Context(), control.OpAudit, control.AuditArgs{}, nil); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("audit on a full disk: %v", err)
	}
	store := storeStatus(t, rig.ts.client)
	if store.Healthy || store.AuditDropped != calls || !strings.Contains(strings.Join(store.Notes, "\n"), "audit: 500 entries dropped: no space left on device") {
		t.Fatalf("status's store: %+v", store)
	}
}
