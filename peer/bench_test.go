package peer

import (
	"encoding/json"
	"testing"

	"octosup/internal/roundtrip"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// BenchmarkRequestRoundTrip: app -> daemon -> kernel -> daemon -> app, one
// request in flight (octos.turn.interrupt, which the kernel answers with a
// reply and the daemon persists nothing for).
func BenchmarkRequestRoundTrip(b *testing.B) {
	h := newHarness(b, nil)
	k, ks := h.kernel()
	a := h.attach(notesApp("notes"))
	h.grant(a)
	ctx := a.open(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case r := <-k.requests:
				ks.Reply(KernelReply{App: r.App, ReqID: r.ReqID, OK: true, Data: json.RawMessage(`{}`)})
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	line, _ := encodeUp(&frame.Request{ReqID: "b", Method: policy.MethodTurnInterrupt,
		Args: json.RawMessage(`{"context_id":"` + ctx + `","turn_id":"T"}`)})
	b.ResetTimer()
	for b.Loop() {
		if _, err := a.conn.Write(line); err != nil {
			b.Fatal(err)
		}
		if r := a.reply("b"); !r.OK {
			b.Fatal(r.Error)
		}
	}
}

// BenchmarkSocketpairEcho is the floor for the above, in the same run: one
// JSON line over a socketpair, decoded and re-encoded by the other end,
// and decoded on return.
func BenchmarkSocketpairEcho(b *testing.B) {
	conns := roundtrip.Socketpair(b)
	done := roundtrip.EchoJSON(conns[1], frame.NewReader(conns[1], frame.MaxFrame).Next)
	defer func() { conns[0].Close(); <-done; conns[1].Close() }()
	line, _ := encodeUp(&frame.Request{ReqID: "b", Method: policy.MethodTurnInterrupt,
		Args: json.RawMessage(`{"context_id":"n0nce-1","turn_id":"T"}`)})
	r := frame.NewReader(conns[0], frame.MaxFrame)
	b.ResetTimer()
	for b.Loop() {
		if _, err := conns[0].Write(line); err != nil {
			b.Fatal(err)
		}
		got, err := r.Next()
		if err != nil {
			b.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(got, &v); err != nil {
			b.Fatal(err)
		}
	}
}
