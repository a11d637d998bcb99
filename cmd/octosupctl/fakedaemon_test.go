package main

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"octosup/control"
)

// fakeEvent is an event a fake daemon sends after an answer.
type fakeEvent struct {
	topic string
	body  any
}

// fakeAnswer answers one request of a fake daemon: the data of an ok
// answer, or an error, and the events to send after it. subscribed says
// whether the connection ran subscribe before.
type fakeAnswer func(op string, args json.RawMessage, subscribed bool) (data any, err *control.Error, events []fakeEvent)

// fakeDaemon serves the control socket's wire with answer, so that a
// test can hand octosupctl whatever a daemon could relay, and returns
// the socket. Everything ends at the test's cleanup.
func fakeDaemon(t *testing.T, answer fakeAnswer) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[nc] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				serveFake(t, nc, answer)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return socket
}

func serveFake(t *testing.T, nc net.Conn, answer fakeAnswer) {
	sc := bufio.NewScanner(nc)
	sc.Buffer(nil, control.MaxLine)
	subscribed := false
	for sc.Scan() {
		req, err := control.DecodeRequest(sc.Bytes())
		if err != nil {
			t.Errorf("fake daemon: %v", err)
			return
		}
		data, cerr, events := answer(req.Op, req.Args, subscribed)
		subscribed = subscribed || req.Op == control.OpSubscribe
		resp := control.Response{ID: req.ID, OK: cerr == nil, Error: cerr}
		if cerr == nil && data != nil {
			if resp.Data, err = json.Marshal(data); err != nil {
				t.Errorf("fake daemon: %v", err)
				return
			}
		}
		lines := [][]byte{mustJSON(t, resp)}
		for _, ev := range events {
			b, err := control.EncodeEvent(ev.topic, ev.body)
			if err != nil {
				t.Errorf("fake daemon: %v", err)
				return
			}
			lines = append(lines, b)
		}
		for _, l := range lines {
			if _, err := nc.Write(append(l, '\n')); err != nil {
				return // the client went away
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
