package control

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestAppendToolEvent(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		ev    ToolEvent
	}{
		{"acknowledged", EventToolAcknowledged, ToolEvent{App: "notes", CallID: "c1"}},
		{"ok with data", EventToolFinished, ToolEvent{App: "notes", CallID: "c1", Outcome: OutcomeOK, Data: json.RawMessage(`{"hits":[1,2,{"a":null}]}`)}},
		{"ok without data", EventToolFinished, ToolEvent{App: "notes", CallID: "c1", Outcome: OutcomeOK}},
		{"error", EventToolFinished, ToolEvent{App: "notes", CallID: "c1", Outcome: OutcomeError, Error: &Error{Code: "timeout", Message: "the app did not answer the call within its timeout"}}},
		// The rest go through EncodeEvent: the same bytes either way.
		{"data to compact", EventToolFinished, ToolEvent{App: "a", CallID: "c", Outcome: OutcomeOK, Data: json.RawMessage(` { "a" : [ 1 , 2 ] } `)}},
		{"data to escape", EventToolFinished, ToolEvent{App: "a", CallID: "c", Outcome: OutcomeOK, Data: json.RawMessage(`{"html":"<b>&</b>","ls":"\u2028 "}`)}},
		{"escaped strings", EventToolFinished, ToolEvent{App: "a\"b", CallID: "c<1>", Outcome: OutcomeError, Error: &Error{Code: "x", Message: "é\n"}}},
		{"error data", EventToolFinished, ToolEvent{App: "a", CallID: "c", Outcome: OutcomeError, Error: &Error{Code: "x", Message: "m", Data: json.RawMessage(`{}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := EncodeEvent(tt.topic, tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := AppendToolEvent([]byte("prefix"), tt.topic, tt.ev)
			if err != nil {
				t.Fatalf("AppendToolEvent: %v", err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("AppendToolEvent = %s\nEncodeEvent     = %s", got[len("prefix"):], want)
			}
		})
	}
}

func TestAppendToolEventInvalidData(t *testing.T) {
	ev := ToolEvent{App: "a", CallID: "c", Outcome: OutcomeOK, Data: json.RawMessage(`{"a":}`)}
	if _, err := AppendToolEvent(nil, EventToolFinished, ev); err == nil {
		t.Fatal("AppendToolEvent took data that is not JSON")
	}
}

// FuzzAppendToolEvent holds AppendToolEvent to EncodeEvent: the same
// bytes, or the same refusal.
func FuzzAppendToolEvent(f *testing.F) {
	f.Add("notes", "c1", "ok", []byte(`{"hits":[]}`), "", "")
	f.Add("notes", "c1", "error", []byte(nil), "timeout", "late")
	f.Add("n\u00f6tes", "c\"1", "", []byte(`[1, "<"]`), "", "")
	f.Add("a", "c", "ok", []byte("\"\xff\""), "", "")
	f.Add("a", "c", "ok", []byte(`{"a":1}{}`), "", "")
	f.Fuzz(func(t *testing.T, app, callID, outcome string, data []byte, code, message string) {
		ev := ToolEvent{App: app, CallID: callID, Outcome: outcome, Data: data}
		if code != "" {
			ev.Error = &Error{Code: code, Message: message}
		}
		want, werr := EncodeEvent(EventToolFinished, ev)
		got, gerr := AppendToolEvent(nil, EventToolFinished, ev)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("EncodeEvent error %v, AppendToolEvent error %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("AppendToolEvent = %s\nEncodeEvent     = %s", got, want)
		}
	})
}

// BenchmarkToolEvent is a call's two events, tool.acknowledged and
// tool.finished, appended and through EncodeEvent side by side: what the
// appends earn.
func BenchmarkToolEvent(b *testing.B) {
	events := []struct {
		topic string
		ev    ToolEvent
	}{
		{EventToolAcknowledged, ToolEvent{App: "tools", CallID: "b12345"}},
		{EventToolFinished, ToolEvent{App: "tools", CallID: "b12345", Outcome: OutcomeOK, Data: json.RawMessage(`{"echo":{"query":"milk"}}`)}},
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range events {
				if _, err := AppendToolEvent(make([]byte, 0, 128), e.topic, e.ev); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("EncodeEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range events {
				if _, err := EncodeEvent(e.topic, e.ev); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
