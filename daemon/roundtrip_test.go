package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/peer"
)

// pingApp is the app of BenchmarkRequestRoundTrip (DAEMON_TEST_PINGAPP):
// it opens a session, then sends octos.turn.interrupt on it again each
// time the previous one is answered, for as long as it runs.
func pingApp() int {
	hub := os.NewFile(3, "hub")
	w := bufio.NewWriter(hub)
	send := func(reqID, method string, args string) {
		fmt.Fprintf(w, `{"octos_peer":{"type":"request","req_id":%q,"method":%q,"args":%s}}`+"\n", reqID, method, args)
		w.Flush()
	}
	send("open", "octos.session.open", `{}`)
	sc := bufio.NewScanner(hub)
	n, ctxID := 0, ""
	for sc.Scan() {
		var f struct {
			Peer struct {
				Type string `json:"type"`
				OK   bool   `json:"ok"`
				Data struct {
					ContextID string `json:"context_id"`
				} `json:"data"`
			} `json:"octos_peer"`
		}
		if json.Unmarshal(sc.Bytes(), &f) != nil || f.Peer.Type != "reply" {
			continue
		}
		if ctxID == "" {
			ctxID = f.Peer.Data.ContextID
		}
		n++
		send(fmt.Sprintf("i%d", n), "octos.turn.interrupt", fmt.Sprintf(`{"context_id":%q,"turn_id":"t"}`, ctxID))
	}
	return 0
}

// BenchmarkRequestRoundTrip is one request of an app through the daemon
// to a kernel on the control socket and its reply back to the app: app →
// hub → daemon → control socket → kernel → control socket → daemon → hub
// → app. Each op is one full cycle, measured at the kernel. Compare with
// BenchmarkJSONEchoProcesses, the floor: the same kind of JSON line
// echoed between two processes over one socketpair.
func BenchmarkRequestRoundTrip(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	env := newTestEnv(b)
	env.writeManifest(b, []byte(fmt.Sprintf(`{"version":1,"apps":[{"id":"ping","exec":[%q],"autostart":true,
		"env":{"DAEMON_TEST_PINGAPP":"1"},
		"grants":{"services":["agent.octos"],"methods":["octos.session.open","octos.turn.interrupt"]},
		"sandbox":{"policy":"broad","network":"full"},"storage":{}}]}`, exe)))
	d := startDaemon(b, env)
	ctx := context.Background()
	kernel, err := d.client.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer kernel.Close()
	if err := kernel.Do(ctx, control.OpKernelAttach, nil, nil); err != nil {
		b.Fatal(err)
	}
	var list control.ApprovalsData
	for len(list.Approvals) == 0 {
		if err := d.client.Do(ctx, control.OpApprovals, nil, &list); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.client.Do(ctx, control.OpApprove, control.ApproveArgs{ApprovalID: list.Approvals[0].ApprovalID, Decision: "allow"}, nil); err != nil {
		b.Fatal(err)
	}
	next := func() peer.KernelRequest {
		for ev := range kernel.Events() {
			var r peer.KernelRequest
			if ev.Name == control.EventRequest && ev.Decode(&r) == nil {
				return r
			}
		}
		b.Fatalf("the kernel connection ended: %v", kernel.Err())
		return peer.KernelRequest{}
	}
	r := next()
	for b.Loop() {
		if err := kernel.Do(ctx, control.OpRequestReply, peer.KernelReply{App: r.App, ReqID: r.ReqID, OK: true, Data: json.RawMessage(`{}`)}, nil); err != nil {
			b.Fatal(err)
		}
		r = next()
	}
}

// BenchmarkJSONEchoProcesses is the floor of BenchmarkRequestRoundTrip:
// a request-sized JSON line written to another process over a socketpair
// and echoed back.
func BenchmarkJSONEchoProcesses(b *testing.B) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "bench"), os.NewFile(uintptr(fds[1]), "echo")
	defer mine.Close()
	cmd := exec.Command("/bin/cat")
	cmd.Stdin, cmd.Stdout = theirs, theirs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	theirs.Close()
	defer cmd.Wait()
	defer unix.Shutdown(fds[0], unix.SHUT_WR)
	line := []byte(`{"octos_peer":{"type":"request","req_id":"i1","method":"octos.turn.interrupt","args":{"context_id":"0123456789abcdef-1","turn_id":"t"}}}` + "\n")
	buf := make([]byte, len(line))
	for b.Loop() {
		if _, err := mine.Write(line); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(mine, buf); err != nil {
			b.Fatal(err)
		}
	}
	if !strings.HasSuffix(string(buf), "}\n") {
		b.Fatalf("echo %q", buf)
	}
}
