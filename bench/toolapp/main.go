// Command toolapp is the app of the bench's tool-call and request
// sections (bench/tools.go). On its hub (fd 3) it
//
//   - opens a session (octos.session.open, account "bench", which the
//     manifest must list in sandbox.accounts) as soon as it starts; once
//     the daemon answered (after the person's first-use consent) tells the
//     bench the context's id in a pass-through frame
//     {"bench_app":{"event":"ready","context_id":"…"}};
//   - answers every tool_call at once with {"ok":true,"data":{}}, one
//     write per answer: the app costs the decoding of the call and nothing
//     else;
//   - on a pass-through frame {"bench":{"requests":N,"inflight":K}} (the
//     bench's app.send) makes N octos.turn.interrupt requests on its
//     context, K at a time, times each from its write to its reply, and
//     sends the times back in a pass-through frame
//     {"bench_app":{"event":"requests","lat_ns":[…],"elapsed_ns":…}}: the
//     round trip app → daemon → kernel → daemon → app, timed where it
//     starts and ends.
//
// It does its hub I/O as bench/jsonecho, the floor, does: an os.File on
// the Go netpoller, one goroutine reading, decoding and writing. It only
// uses its hub, so it runs in a jail with network none and processes
// false.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const hubFD = 3

// maxRequests bounds a requests run so that its answer (≤ ~12 bytes a
// time) stays well under the hub's 1 MiB line.
const maxRequests = 50000

func main() {
	if err := serve(); err != nil {
		fmt.Fprintf(os.Stderr, "toolapp: %v\n", err)
		os.Exit(2)
	}
}

// frame is every line the app may get: a peer-link frame or the bench's
// command.
type frame struct {
	Peer *struct {
		Type   string `json:"type"`
		ReqID  string `json:"req_id"`
		CallID string `json:"call_id"`
		OK     bool   `json:"ok"`
		Data   struct {
			ContextID string `json:"context_id"`
		} `json:"data"`
		Error json.RawMessage `json:"error"`
	} `json:"octos_peer"`
	Bench *struct {
		Requests int `json:"requests"`
		Inflight int `json:"inflight"`
	} `json:"bench"`
}

// app is the hub's one goroutine's state: a single writer, no lock.
type app struct {
	hub     *os.File
	out     []byte
	context string
	run     *requestRun
	runs    int // requests runs so far: the prefix of their req_ids
}

// requestRun is one requests command in progress.
type requestRun struct {
	n, inflight, sent, done int
	t0                      time.Time
	started                 []time.Time
	lat                     []int64
}

func serve() error {
	if err := unix.SetNonblock(hubFD, true); err != nil {
		return fmt.Errorf("fd %d is not open (%v): start me with a socket as fd 3", hubFD, err)
	}
	a := &app{hub: os.NewFile(hubFD, "hub")}
	if err := a.write(`{"octos_peer":{"type":"request","req_id":"open","method":"octos.session.open","args":{"account":"bench"}}}`); err != nil {
		return err
	}
	r := bufio.NewReaderSize(a.hub, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, bufio.ErrBufferFull):
			// Nothing the bench sends is this long: say so and go on.
			fmt.Fprintf(os.Stderr, "toolapp: a line over %d bytes, skipped\n", r.Size())
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			continue
		case err != nil:
			return fmt.Errorf("read the hub: %w", err)
		}
		if err := a.handle(line); err != nil {
			return err
		}
	}
}

func (a *app) handle(line []byte) error {
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		fmt.Fprintf(os.Stderr, "toolapp: a line that is not JSON (%v): %.200s\n", err, line)
		return nil
	}
	switch {
	case f.Bench != nil:
		return a.startRequests(f.Bench.Requests, f.Bench.Inflight)
	case f.Peer == nil:
		return nil
	case f.Peer.Type == "tool_call":
		a.out = append(a.out[:0], `{"octos_peer":{"type":"tool_result","call_id":`...)
		a.out = strconv.AppendQuote(a.out, f.Peer.CallID) // ids are printable ASCII: JSON as quoted
		a.out = append(a.out, `,"ok":true,"data":{}}}`+"\n"...)
		return a.writeOut()
	case f.Peer.Type == "reply" && f.Peer.ReqID == "open":
		if !f.Peer.OK || f.Peer.Data.ContextID == "" {
			return a.report(`{"event":"error","message":` + jsonString("octos.session.open: "+string(f.Peer.Error)) + `}`)
		}
		a.context = f.Peer.Data.ContextID
		return a.report(`{"event":"ready","context_id":` + jsonString(a.context) + `}`)
	case f.Peer.Type == "reply":
		return a.replied(f.Peer.ReqID, f.Peer.OK, f.Peer.Error)
	}
	return nil
}

func (a *app) startRequests(n, inflight int) error {
	switch {
	case a.run != nil:
		return a.report(`{"event":"error","message":"a requests run is in progress"}`)
	case a.context == "":
		return a.report(`{"event":"error","message":"no context: octos.session.open was not answered yet"}`)
	case n < 1 || n > maxRequests || inflight < 1:
		return a.report(fmt.Sprintf(`{"event":"error","message":"requests must be 1..%d and inflight at least 1"}`, maxRequests))
	}
	a.runs++
	a.run = &requestRun{n: n, inflight: inflight, started: make([]time.Time, n), lat: make([]int64, n), t0: time.Now()}
	for a.run.sent < min(n, inflight) {
		if err := a.sendRequest(); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) sendRequest() error {
	r := a.run
	i := r.sent
	r.sent++
	a.out = append(a.out[:0], `{"octos_peer":{"type":"request","req_id":"q`...)
	a.out = strconv.AppendInt(a.out, int64(a.runs), 10)
	a.out = append(a.out, '.')
	a.out = strconv.AppendInt(a.out, int64(i), 10)
	a.out = append(a.out, `","method":"octos.turn.interrupt","args":{"context_id":`...)
	a.out = strconv.AppendQuote(a.out, a.context)
	a.out = append(a.out, `,"turn_id":"t"}}}`+"\n"...)
	r.started[i] = time.Now()
	return a.writeOut()
}

// replied takes the reply to request q<run>.<i>.
func (a *app) replied(reqID string, ok bool, perr json.RawMessage) error {
	at := time.Now()
	r := a.run
	if r == nil {
		return nil
	}
	runs, idx, found := strings.Cut(strings.TrimPrefix(reqID, "q"), ".")
	i, err := strconv.Atoi(idx)
	if !found || runs != strconv.Itoa(a.runs) || err != nil || i < 0 || i >= r.sent || r.lat[i] != 0 {
		return nil // not this run's
	}
	if !ok {
		a.run = nil
		return a.report(`{"event":"error","message":` + jsonString("octos.turn.interrupt "+reqID+": "+string(perr)) + `}`)
	}
	r.lat[i] = max(1, int64(at.Sub(r.started[i])))
	r.done++
	if r.sent < r.n {
		return a.sendRequest()
	}
	if r.done < r.n {
		return nil
	}
	a.run = nil
	body, err := json.Marshal(struct {
		Event     string  `json:"event"`
		LatNS     []int64 `json:"lat_ns"`
		ElapsedNS int64   `json:"elapsed_ns"`
	}{"requests", r.lat, int64(at.Sub(r.t0))})
	if err != nil {
		return err
	}
	return a.report(string(body))
}

// report sends the bench a pass-through frame {"bench_app": body}.
func (a *app) report(body string) error {
	return a.write(`{"bench_app":` + body + `}`)
}

func (a *app) write(line string) error {
	a.out = append(append(a.out[:0], line...), '\n')
	return a.writeOut()
}

func (a *app) writeOut() error {
	if _, err := a.hub.Write(a.out); err != nil {
		return fmt.Errorf("write the hub: %w", err)
	}
	return nil
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
