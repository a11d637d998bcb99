// Command app is make chaos's supervised app: a hub app that opens one
// session per account it is given on its command line, and serves tool
// calls with whatever behaviour the call's args ask for, so that the
// kernel's seed decides every path the daemon sees:
//
//	{"do": "ok"}      ok (after awaiting_confirmation when confirm_required)
//	{"do": "error"}   an error result (awaiting_confirmation first when asked)
//	{"do": "slow", "ms": N}  ok after N ms
//	{"do": "hang"}    never answers
//	{"do": "skip"}    ok without the awaiting_confirmation it owes
//	{"do": "double"}  two results, then a late awaiting_confirmation
//	{"do": "crash"}   exits with status 7 before answering
//
// With "late": true a call that was cancelled (tool_cancel) is answered
// anyway, which the daemon must ignore. Every ok result's data carries the
// call_id the app was sent, so the kernel can tell whose outcome it got.
//
//	app ACCOUNT...   (the hub is fd 3, or OCTOSUP_HUB_FD)
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const maxFrame = 1 << 20

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chaos app:", err)
		os.Exit(1)
	}
}

type app struct {
	hub *os.File
	wmu sync.Mutex

	mu        sync.Mutex
	seq       int
	opens     map[string]string // req_id of an open session request → account
	accounts  map[string]string // context_id → account
	cancelled map[string]bool
}

func run(accounts []string) error {
	fd := 3
	if s := os.Getenv("OCTOSUP_HUB_FD"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("OCTOSUP_HUB_FD=%q is not a file descriptor", s)
		}
		fd = n
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("no hub on fd %d (run it under octosupd): %w", fd, err)
	}
	a := &app{
		hub:       os.NewFile(uintptr(fd), "hub"),
		opens:     map[string]string{},
		accounts:  map[string]string{},
		cancelled: map[string]bool{},
	}
	for _, acct := range accounts {
		a.open(acct)
	}
	sc := bufio.NewScanner(a.hub)
	sc.Buffer(make([]byte, 64<<10), maxFrame+1)
	for sc.Scan() {
		var env struct {
			Peer map[string]json.RawMessage `json:"octos_peer"`
		}
		if json.Unmarshal(sc.Bytes(), &env) != nil || env.Peer == nil {
			continue
		}
		a.handle(env.Peer)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("hub read: %w", err)
	}
	return errors.New("the daemon closed the hub")
}

// open asks for a session of account; a titled session is the same one
// across restarts.
func (a *app) open(account string) {
	a.mu.Lock()
	a.seq++
	id := "open-" + strconv.Itoa(a.seq)
	a.opens[id] = account
	a.mu.Unlock()
	a.send(map[string]any{"type": "request", "req_id": id, "method": "octos.session.open",
		"args": map[string]any{"account": account, "title": "chaos " + account}})
}

func (a *app) send(frame map[string]any) {
	b, err := json.Marshal(map[string]any{"octos_peer": frame})
	if err != nil {
		return
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.hub.Write(append(b, '\n'))
}

func str(m map[string]json.RawMessage, k string) string {
	var s string
	json.Unmarshal(m[k], &s)
	return s
}

func (a *app) handle(f map[string]json.RawMessage) {
	switch str(f, "type") {
	case "reply":
		reqID := str(f, "req_id")
		a.mu.Lock()
		account, ok := a.opens[reqID]
		delete(a.opens, reqID)
		a.mu.Unlock()
		if !ok {
			return
		}
		var ok2 bool
		json.Unmarshal(f["ok"], &ok2)
		if !ok2 {
			// Consent not answered yet, or refused: ask again soon.
			time.AfterFunc(time.Second, func() { a.open(account) })
			return
		}
		var data struct {
			ContextID string `json:"context_id"`
		}
		json.Unmarshal(f["data"], &data)
		a.mu.Lock()
		a.accounts[data.ContextID] = account
		a.mu.Unlock()
	case "context_closed":
		ctx := str(f, "context_id")
		a.mu.Lock()
		account, ok := a.accounts[ctx]
		delete(a.accounts, ctx)
		a.mu.Unlock()
		if ok {
			time.AfterFunc(50*time.Millisecond, func() { a.open(account) })
		}
	case "tool_cancel":
		a.mu.Lock()
		a.cancelled[str(f, "call_id")] = true
		a.mu.Unlock()
	case "tool_call":
		a.toolCall(f)
	}
}

func (a *app) toolCall(f map[string]json.RawMessage) {
	callID := str(f, "call_id")
	var confirm bool
	json.Unmarshal(f["confirm_required"], &confirm)
	var args struct {
		Do   string `json:"do"`
		MS   int    `json:"ms"`
		Late bool   `json:"late"`
	}
	json.Unmarshal(f["args"], &args)
	ok := func() {
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": true, "data": map[string]any{"call_id": callID}})
	}
	awaiting := func() {
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "awaiting_confirmation": true})
	}
	switch args.Do {
	case "ok":
		if confirm {
			awaiting()
		}
		ok()
	case "error":
		if confirm {
			awaiting()
		}
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": false,
			"error": map[string]string{"code": "chaos", "message": "the chaos app said no"}})
	case "slow":
		if confirm {
			awaiting()
		}
		time.AfterFunc(time.Duration(min(args.MS, 60_000))*time.Millisecond, func() {
			a.mu.Lock()
			gone := a.cancelled[callID]
			delete(a.cancelled, callID)
			a.mu.Unlock()
			if !gone || args.Late {
				ok()
			}
		})
	case "hang":
	case "skip":
		ok()
	case "double":
		if confirm {
			awaiting()
		}
		ok()
		ok()
		awaiting()
	case "crash":
		os.Exit(7)
	default:
		a.send(map[string]any{"type": "tool_result", "call_id": callID, "ok": false,
			"error": map[string]string{"code": "bad_frame", "message": fmt.Sprintf("no behaviour %q", args.Do)}})
	}
}
