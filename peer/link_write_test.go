package peer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The tool_call of the only call out is written by its sender when the
// link's writer is idle (link.write with now); these pin what happens when the
// socket does not take it all at once.

// TestToolCallLargerThanTheSocket: a tool_call larger than the hub's
// socket buffer is written in part at once and the rest by the writer,
// whole and in order with what follows.
func TestToolCallLargerThanTheSocket(t *testing.T) {
	h, relay := newToolHarness(t, nil)
	a, ctx := h.toolApp(toolEntry("notes"))
	big := kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone)
	big.Args = json.RawMessage(`{"q":"` + strings.Repeat("m", 900<<10) + `"}`) // over any default socket buffer
	h.call("notes", big)
	second := kc(ctx, "c2", "notes.search", RiskRead, ConfirmNone)
	h.call("notes", second)
	// The app reads only now: the first frame could not have gone in one write.
	if got := a.nextToolCall("c1"); string(got.Args) != string(big.Args) {
		t.Fatalf("tool_call c1 arrived with %d bytes of args, want %d", len(got.Args), len(big.Args))
	}
	a.nextToolCall("c2")
	a.ok("c1", "")
	a.ok("c2", "")
	expectRelay(t, relay, "ack notes c1", "ack notes c2", "fin notes c1 ok", "fin notes c2 ok")
}

// TestToolCallAfterTheWriteDeadlinePassed: a hub whose last write
// deadline is long past (an app idle for longer than WriteTimeout) still
// gets the call: the sender leaves it to the writer, which arms a fresh
// deadline, instead of taking the old one for an app that does not read.
func TestToolCallAfterTheWriteDeadlinePassed(t *testing.T) {
	const timeout = 50 * time.Millisecond
	h, relay := newToolHarness(t, func(c *Config) { c.WriteTimeout = timeout })
	a, ctx := h.toolApp(toolEntry("notes"))
	// What is under test is time passing: the deadline the writer armed
	// for its last write (the context's reply) runs out.
	time.Sleep(2 * timeout)
	h.call("notes", kc(ctx, "c1", "notes.search", RiskRead, ConfirmNone))
	a.nextToolCall("c1")
	a.ok("c1", `{"hits":[]}`)
	expectRelay(t, relay, "ack notes c1", `fin notes c1 ok {"hits":[]}`)
	if !h.m.LinkStatus("notes").Connected {
		t.Fatal("the link went down")
	}
}
