// Command notes is octosup's demo of the peer link: a notes app that talks
// to the agent service over its hub (fd 3, OCTOSUP_HUB_FD) in the protocol
// of docs/protocol.md, using nothing but the standard library.
//
// At start it opens a session, so the first run raises the first-use
// consent approval (answer it with `octosupctl approvals` and `octosupctl
// approve ID allow`). It logs every frame it receives to stdout (see
// `octosupctl logs notes`) and serves two tools the agent may call:
//
//	notes.search {"query": "milk", "delay_ms"?: 5000}
//	    risk read: the lines of notes.txt that match (after delay_ms, unless
//	    the call is cancelled meanwhile: try --timeout or Ctrl-C)
//	notes.append {"text": "...", "skip_confirmation"?: true}
//	    risk write: appends a line; when the call says confirm_required it
//	    first answers awaiting_confirmation, then the result (with
//	    skip_confirmation it misbehaves on purpose and does not ask: the
//	    daemon refuses the result, confirmation_skipped)
//
// Any other argument, or one of the wrong type, is refused with
// bad_frame and says what the tool takes: a misspelled argument is never
// ignored.
//
// The notes live in $OCTOSUP_JAIL/notes.txt, the app's private directory.
//
// Every path of a tool call can be tried from a terminal once the consent
// prompt is answered:
//
//	octosupctl call notes notes.search '{"query": "milk"}'                  # read
//	octosupctl call notes notes.append '{"text": "buy milk"}' --risk write --confirm app
//	octosupctl call notes notes.search '{}' --confirm host                  # then approve, --remember
//	octosupctl call notes notes.append '{"text": "x", "skip_confirmation": true}' --risk write --confirm app
//	octosupctl call notes notes.search '{"delay_ms": 5000}' --timeout 1s    # a deadline (or Ctrl-C)
//	octosupctl audit notes; octosupctl rules
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const maxFrame = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "notes:", err)
		os.Exit(1)
	}
}

// app is the notes app's state: its hub and its notes file.
type app struct {
	hub   *os.File
	notes string
	wmu   sync.Mutex // one frame at a time on the hub
	seq   int

	mu        sync.Mutex
	cancelled map[string]bool // calls the daemon withdrew: never answered
}

func run(ctx context.Context) error {
	fd := 3
	if s := os.Getenv("OCTOSUP_HUB_FD"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("OCTOSUP_HUB_FD=%q is not a file descriptor", s)
		}
		fd = n
	}
	// Non-blocking, so that the runtime poller owns the fd and Close
	// unblocks a pending read at shutdown.
	if err := syscall.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("no hub on fd %d (run notes under octosupd): %w", fd, err)
	}
	hub := os.NewFile(uintptr(fd), "hub")
	dir := os.Getenv("OCTOSUP_JAIL")
	if dir == "" {
		return errors.New("OCTOSUP_JAIL is not set: the manifest entry needs storage.jail")
	}
	a := &app{hub: hub, notes: filepath.Join(dir, "notes.txt"), cancelled: map[string]bool{}}
	fmt.Printf("notes %s started (pid %d), notes in %s\n", os.Getenv("OCTOSUP_APP_ID"), os.Getpid(), a.notes)

	go func() { <-ctx.Done(); hub.Close() }() // unblocks the reader
	a.openSession()
	err := a.serve()
	if ctx.Err() != nil {
		fmt.Println("notes: stopping")
		return nil
	}
	return err
}

// openSession asks for a context; the first time ever, the daemon asks the
// person for consent before it answers.
func (a *app) openSession() {
	a.seq++
	a.send(map[string]any{"type": "request", "req_id": "open-" + strconv.Itoa(a.seq),
		"method": "octos.session.open", "args": map[string]any{"title": "notes"}})
	fmt.Println("asked for a session (first run: answer the consent approval with octosupctl)")
}

func (a *app) send(frame map[string]any) {
	b, err := json.Marshal(map[string]any{"octos_peer": frame})
	if err != nil {
		fmt.Println("encode:", err)
		return
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if _, err := a.hub.Write(append(b, '\n')); err != nil {
		fmt.Println("hub write:", err)
	}
}

func (a *app) serve() error {
	sc := bufio.NewScanner(a.hub)
	sc.Buffer(make([]byte, 64<<10), maxFrame+1)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Printf("received: %s\n", line)
		var env struct {
			Peer map[string]json.RawMessage `json:"octos_peer"`
		}
		if err := json.Unmarshal(line, &env); err != nil || env.Peer == nil {
			continue // a pass-through frame from the shell: logged above
		}
		a.handle(env.Peer)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("hub read: %w", err)
	}
	return io.EOF
}

func str(m map[string]json.RawMessage, k string) string {
	var s string
	json.Unmarshal(m[k], &s)
	return s
}

func (a *app) handle(f map[string]json.RawMessage) {
	switch str(f, "type") {
	case "reply":
		var e struct {
			Code string `json:"code"`
		}
		json.Unmarshal(f["error"], &e)
		switch e.Code {
		case "consent_required":
			fmt.Println("nobody answered the consent prompt; asking again in 30s")
			time.AfterFunc(30*time.Second, a.openSession)
		case "consent_denied":
			// notes asks only at start: a revoke alone would ask
			// nothing until its next start.
			id := cmp.Or(os.Getenv("OCTOSUP_APP_ID"), "notes")
			fmt.Printf("the agent service was denied to this app; to be asked again: `octosupctl consent revoke %s`, then `octosupctl restart %s`\n", id, id)
		}
	case "tool_call":
		a.toolCall(f)
	case "tool_cancel":
		fmt.Printf("call %s cancelled: %s\n", str(f, "call_id"), str(f, "reason"))
		a.mu.Lock()
		a.cancelled[str(f, "call_id")] = true
		a.mu.Unlock()
	case "context_closed":
		fmt.Printf("context %s closed: %s\n", str(f, "context_id"), str(f, "reason"))
	}
}

func (a *app) toolCall(f map[string]json.RawMessage) {
	callID := str(f, "call_id")
	var confirm bool
	json.Unmarshal(f["confirm_required"], &confirm)
	fail := func(code, msg string) {
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": false,
			"error": map[string]string{"code": code, "message": msg}})
	}
	switch name := str(f, "name"); name {
	case "notes.search":
		var query string
		var delay int64
		if err := toolArgs(f["args"], map[string]any{"query": &query, "delay_ms": &delay}); err != nil {
			fail("bad_frame", searchUsage+": "+err.Error())
			return
		}
		answer := func() {
			a.mu.Lock()
			gone := a.cancelled[callID]
			a.mu.Unlock()
			if gone {
				return // nothing is sent for a call after its tool_cancel
			}
			matches, err := a.search(query)
			if err != nil {
				fail("internal", err.Error())
				return
			}
			a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": true, "data": map[string]any{"matches": matches}})
		}
		if delay > 0 {
			time.AfterFunc(time.Duration(min(delay, 600_000))*time.Millisecond, answer)
			return
		}
		answer()
	case "notes.append":
		var text string
		var skip bool
		err := toolArgs(f["args"], map[string]any{"text": &text, "skip_confirmation": &skip})
		if err == nil && (text == "" || strings.ContainsAny(text, "\r\n")) {
			err = errors.New(`"text" must be one line, not empty`)
		}
		if err != nil {
			fail("bad_frame", appendUsage+": "+err.Error())
			return
		}
		if confirm && !skip {
			// A real app would show its own sheet here; the demo says it
			// is asking, then takes the answer as yes.
			a.send(map[string]any{"type": "tool_result", "call_id": callID, "awaiting_confirmation": true})
		}
		n, err := a.appendLine(text)
		if err != nil {
			fail("internal", err.Error())
			return
		}
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": true, "data": map[string]any{"line": n}})
	default:
		fail("unknown_method", fmt.Sprintf("notes has no tool %q", name))
	}
}

// What each tool takes, as its refusals of bad args say.
const (
	searchUsage = `notes.search takes {"query": "milk", "delay_ms"?: 5000}`
	appendUsage = `notes.append takes {"text": "one line", "skip_confirmation"?: true}`
)

// toolArgs decodes a call's args, one JSON object, into fields (name to
// *string, *int64 or *bool) and refuses a member that is not one of them,
// by its exact name: a caller that misspelled an argument is told so,
// instead of getting an answer for the argument's default (a search for
// "" matches every line).
func toolArgs(raw json.RawMessage, fields map[string]any) error {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return errors.New("it wants a JSON object of arguments")
	}
	names := make([]string, 0, len(args))
	for name := range args {
		names = append(names, name)
	}
	slices.Sort(names) // the same refusal for the same args
	for _, name := range names {
		dst, ok := fields[name]
		if !ok {
			return fmt.Errorf("unknown argument %q", name)
		}
		if err := json.Unmarshal(args[name], dst); err != nil {
			kind := "a number"
			switch dst.(type) {
			case *string:
				kind = "a string"
			case *bool:
				kind = "true or false"
			}
			return fmt.Errorf("%q is not %s", name, kind)
		}
	}
	return nil
}

type match struct {
	Line int    `json:"line"`
	Text string `json:"text"`
}

func (a *app) search(query string) ([]match, error) {
	data, err := os.ReadFile(a.notes)
	if errors.Is(err, os.ErrNotExist) {
		return []match{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []match{}
	q := strings.ToLower(query)
	for i, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if l != "" && strings.Contains(strings.ToLower(l), q) {
			out = append(out, match{Line: i + 1, Text: l})
		}
	}
	return out, nil
}

func (a *app) appendLine(text string) (int, error) {
	f, err := os.OpenFile(a.notes, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteString(text + "\n"); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	data, err := os.ReadFile(a.notes)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(data), "\n"), nil
}
