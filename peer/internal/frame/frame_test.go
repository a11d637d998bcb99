package frame

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name     string
		line     string
		pass     bool   // a pass-through frame
		bad      string // substring of the bad_frame reason; "" means accepted
		reqID    string // attributed req_id of a bad frame
		wantType string
	}{
		{name: "request", line: `{"octos_peer":{"type":"request","req_id":"r1","method":"octos.session.open"}}`, wantType: TypeRequest},
		{name: "request with spaces", line: ` { "octos_peer" : { "type" : "request", "req_id" : "r1", "method" : "m", "args" : { } } } `, wantType: TypeRequest},
		{name: "passthrough", line: `{"ui":{"title":"hello"}}`, pass: true},
		{name: "passthrough empty object", line: `{}`, pass: true},
		{name: "empty line", line: ``, bad: "empty line"},
		{name: "blank line", line: "  \t\r", bad: "empty line"},
		{name: "array", line: `[1,2]`, bad: "not a JSON object"},
		{name: "string", line: `"hi"`, bad: "not a JSON object"},
		{name: "number", line: `42`, bad: "not a JSON object"},
		{name: "garbage", line: `hello`, bad: "not a JSON object"},
		{name: "truncated", line: `{"octos_peer":{"type":"request"`, bad: "malformed"},
		{name: "two objects", line: `{"a":1}{"b":2}`, bad: "second JSON value"},
		{name: "object then number", line: `{"a":1} 2`, bad: "second JSON value"},
		{name: "invalid utf-8", line: "{\"a\":\"\xff\"}", bad: "UTF-8"},
		{name: "overlong utf-8", line: "{\"a\":\"\xc0\xaf\"}", bad: "UTF-8"},
		{name: "duplicate top key", line: `{"octos_peer":{},"octos_peer":{}}`, bad: "duplicate key"},
		{name: "duplicate envelope key", line: `{"octos_peer":{"type":"request","req_id":"r1","req_id":"r2","method":"m"}}`, bad: "duplicate key"},
		{name: "duplicate nested key", line: `{"octos_peer":{"type":"request","req_id":"r1","method":"m","args":{"a":1,"a":2}}}`, bad: "duplicate key", reqID: ""},
		{name: "duplicate in passthrough", line: `{"x":{"y":1,"y":1}}`, bad: "duplicate key"},
		{name: "case-variant key", line: `{"octos_peer":{"type":"request","req_id":"r1","Method":"m","method":"m"}}`, bad: `unknown member "Method"`, reqID: "r1"},
		{name: "case-variant only", line: `{"octos_peer":{"type":"request","REQ_ID":"r1","method":"m"}}`, bad: `unknown member "REQ_ID"`},
		{name: "case-variant envelope", line: `{"Octos_Peer":{"type":"request","req_id":"r1","method":"m"}}`, bad: "case-sensitive", reqID: "r1"},
		{name: "case-variant envelope, bad req_id", line: `{"OCTOS_PEER":{"type":"request","req_id":7}}`, bad: "case-sensitive"},
		{name: "case-variant envelope beside others", line: `{"ui":1,"OCTOS_PEER":{}}`, bad: "case-sensitive"},
		{name: "unknown member", line: `{"octos_peer":{"type":"request","req_id":"r9","method":"m","app":"other"}}`, bad: `unknown member "app"`, reqID: "r9"},
		{name: "member beside envelope", line: `{"octos_peer":{"type":"request","req_id":"r9","method":"m"},"app":"x"}`, bad: "beside", reqID: "r9"},
		{name: "envelope not object", line: `{"octos_peer":[1]}`, bad: "want an object"},
		{name: "type wrong type", line: `{"octos_peer":{"type":1}}`, bad: "want a string"},
		{name: "unknown type", line: `{"octos_peer":{"type":"reply","req_id":"r1","ok":true}}`, bad: "unknown type", reqID: "r1"},
		{name: "req_id number", line: `{"octos_peer":{"type":"request","req_id":7,"method":"m"}}`, bad: `"req_id": want a string`},
		{name: "req_id null", line: `{"octos_peer":{"type":"request","req_id":null,"method":"m"}}`, bad: `"req_id": want a string`},
		{name: "req_id empty", line: `{"octos_peer":{"type":"request","req_id":"","method":"m"}}`, bad: "printable ASCII"},
		{name: "req_id too long", line: `{"octos_peer":{"type":"request","req_id":"` + long + `","method":"m"}}`, bad: "printable ASCII"},
		{name: "req_id 128", line: `{"octos_peer":{"type":"request","req_id":"` + long[:128] + `","method":"m"}}`, wantType: TypeRequest},
		{name: "req_id control char", line: `{"octos_peer":{"type":"request","req_id":"a\u0001","method":"m"}}`, bad: "printable ASCII"},
		{name: "req_id non-ascii", line: `{"octos_peer":{"type":"request","req_id":"é","method":"m"}}`, bad: "printable ASCII"},
		{name: "args not object", line: `{"octos_peer":{"type":"request","req_id":"r1","method":"m","args":[]}}`, bad: `"args": want an object`, reqID: "r1"},
		{name: "method missing", line: `{"octos_peer":{"type":"request","req_id":"r1"}}`, bad: `missing "method"`, reqID: "r1"},
		{name: "method empty", line: `{"octos_peer":{"type":"request","req_id":"r1","method":""}}`, bad: `empty "method"`, reqID: "r1"},
		{name: "tool_result ok", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true}}`, wantType: TypeToolResult},
		{name: "tool_result ok with error", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":true,"error":{"code":"x","message":""}}}`, bad: "cannot go with"},
		{name: "tool_result fail without error", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false}}`, bad: `missing "error"`},
		{name: "tool_result awaiting false", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":false}}`, bad: "only true"},
		{name: "tool_result awaiting and ok", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","awaiting_confirmation":true,"ok":true}}`, bad: "cannot go with"},
		{name: "tool_result ok string", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":"true"}}`, bad: "want true or false"},
		{name: "tool_result error extra", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false,"error":{"code":"x","message":"m","app":"y"}}}`, bad: `unknown member "app"`},
		{name: "tool_result error null", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false,"error":null}}`, bad: `octos_peer.error: want an object`},
		{name: "tool_result error string", line: `{"octos_peer":{"type":"tool_result","call_id":"c1","ok":false,"error":"boom"}}`, bad: `octos_peer.error: want an object`},
		{name: "envelope null", line: `{"octos_peer":null}`, bad: "octos_peer: want an object"},
		{name: "past jsontext's depth", line: `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, bad: "nested deeper than 32"},
		// The first case variant as written is the one named, the same
		// every time.
		{name: "case variants", line: `{"Octos_Peer":{"req_id":"a"},"OCTOS_PEER":{"req_id":"b"},"OcToS_PeEr":{"req_id":"c"}}`, bad: `top-level key "Octos_Peer"`, reqID: "a"},
		{name: "too deep", line: strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200), bad: "nested deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, pass, err := ParseLine([]byte(tt.line))
			if tt.bad != "" {
				var fe *FrameError
				if !errors.As(err, &fe) {
					t.Fatalf("got (%#v, %v, %v), want bad_frame containing %q", up, pass, err, tt.bad)
				}
				if !strings.Contains(fe.Reason, tt.bad) {
					t.Fatalf("reason %q does not contain %q", fe.Reason, tt.bad)
				}
				if fe.ReqID != tt.reqID {
					t.Fatalf("attributed req_id %q, want %q", fe.ReqID, tt.reqID)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if pass != tt.pass {
				t.Fatalf("passthrough = %v, want %v", pass, tt.pass)
			}
			if !tt.pass && upType(up) != tt.wantType {
				t.Fatalf("type %s, want %s", upType(up), tt.wantType)
			}
		})
	}
}

// chunkReader hands out its data a few bytes per Read, as a socket may.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func readAll(t *testing.T, r *Reader) (lines []string, tooLong int) {
	t.Helper()
	for {
		line, err := r.Next()
		switch {
		case err == io.EOF:
			return lines, tooLong
		case errors.Is(err, ErrFrameTooLong):
			tooLong++
			lines = append(lines, "<too long>")
		case err != nil:
			t.Fatalf("next: %v", err)
		default:
			if len(line) > r.max {
				t.Fatalf("line of %d bytes over cap %d", len(line), r.max)
			}
			lines = append(lines, string(line))
		}
	}
}

func TestReader(t *testing.T) {
	const max = 16
	tests := []struct {
		name  string
		input string
		chunk int
		want  []string
	}{
		{name: "many in one write", input: "a\nbb\n\nccc\n", chunk: 1 << 20, want: []string{"a", "bb", "", "ccc"}},
		{name: "split over many writes", input: "hello world\nsecond\n", chunk: 1, want: []string{"hello world", "second"}},
		{name: "exact cap", input: strings.Repeat("x", max) + "\nok\n", chunk: 3, want: []string{strings.Repeat("x", max), "ok"}},
		{name: "cap plus one", input: strings.Repeat("x", max+1) + "\nok\n", chunk: 3, want: []string{"<too long>", "ok"}},
		{name: "cap plus one, one write", input: strings.Repeat("x", max+1) + "\nok\n", chunk: 1 << 20, want: []string{"<too long>", "ok"}},
		{name: "very long line", input: strings.Repeat("y", 10*max) + "\nafter\n", chunk: 5, want: []string{"<too long>", "after"}},
		{name: "unterminated tail dropped", input: "a\npartial", chunk: 4, want: []string{"a"}},
		{name: "crlf kept", input: "a\r\n", chunk: 4, want: []string{"a\r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(&chunkReader{data: []byte(tt.input), n: tt.chunk}, max)
			got, _ := readAll(t, r)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReaderBufferFollowsTheTraffic: the read buffer is small while
// reads are, doubles up to readChunk while reads fill it, and is small
// again after a read that takes little; the lines come out whole across
// every change of buffer.
func TestReaderBufferFollowsTheTraffic(t *testing.T) {
	line := strings.Repeat("z", 999) + "\n"
	burst := strings.Repeat(line, 200) // 200 KB: reads fill the buffer
	pr, pw := io.Pipe()
	r := NewReader(pr, MaxFrame)
	if len(r.buf) != minChunk {
		t.Fatalf("a new reader holds %d bytes, want %d", len(r.buf), minChunk)
	}
	go func() {
		pw.Write([]byte(burst))
		pw.Write([]byte("small\n"))
		pw.Close()
	}()
	grew := 0
	for i := range 200 {
		got, err := r.Next()
		if err != nil || string(got) != line[:999] {
			t.Fatalf("line %d: %.20q, %v", i, got, err)
		}
		grew = max(grew, len(r.buf))
	}
	if grew != readChunk {
		t.Errorf("during the burst the buffer reached %d bytes, want %d", grew, readChunk)
	}
	if got, err := r.Next(); err != nil || string(got) != "small" {
		t.Fatalf("after the burst: %q, %v", got, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	if len(r.buf) != minChunk {
		t.Errorf("after a small read the buffer holds %d bytes, want %d", len(r.buf), minChunk)
	}
}

// TestReaderEndlessLine feeds a line that never ends: the reader must
// refuse it as soon as it passes the cap, without buffering it, and the
// caller must get control back.
func TestReaderEndlessLine(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReader(pr, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		chunk := bytes.Repeat([]byte("z"), 4096)
		for range 1000 { // 4 MiB, never a newline
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Write([]byte("\n{\"ok\":1}\n"))
		pw.Close()
	}()
	if _, err := r.Next(); !errors.Is(err, ErrFrameTooLong) {
		t.Fatalf("first Next: %v, want ErrFrameTooLong", err)
	}
	if cap(r.line) > 1024 {
		t.Fatalf("reader holds %d bytes of line", cap(r.line))
	}
	line, err := r.Next()
	if err != nil || string(line) != `{"ok":1}` {
		t.Fatalf("after resync: %q, %v", line, err)
	}
	<-done
}

// TestMaxFrameLine checks the real cap: a 1 MiB line is a frame, one byte
// more is not.
func TestMaxFrameLine(t *testing.T) {
	exact := passthroughOfSize(MaxFrame)
	over := passthroughOfSize(MaxFrame + 1)
	input := append(append(append([]byte{}, exact...), '\n'), over...)
	input = append(input, "\n{}\n"...)
	r := NewReader(&chunkReader{data: input, n: 4096}, MaxFrame)
	line, err := r.Next()
	if err != nil || len(line) != MaxFrame {
		t.Fatalf("exact cap: len %d, %v", len(line), err)
	}
	if _, pass, err := ParseLine(line); err != nil || !pass {
		t.Fatalf("exact-cap line: pass=%v err=%v", pass, err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrFrameTooLong) {
		t.Fatalf("cap+1: %v, want ErrFrameTooLong", err)
	}
	if line, err := r.Next(); err != nil || string(line) != "{}" {
		t.Fatalf("after cap+1: %q, %v", line, err)
	}
}

// passthroughOfSize is a valid JSON object of exactly n bytes.
func passthroughOfSize(n int) []byte {
	const head, tail = `{"pad":"`, `"}`
	return []byte(head + strings.Repeat("p", n-len(head)-len(tail)) + tail)
}

func TestEncodeRefusesBadRaw(t *testing.T) {
	if _, err := EncodeDown(&Event{ReqID: "r1", Event: []byte("{nope")}); err == nil {
		t.Fatal("encoded invalid JSON")
	}
	if _, err := EncodeDown(&Reply{ReqID: "r1", OK: false}); err == nil {
		t.Fatal("encoded a failed reply without error")
	}
}

func upType(f Up) string {
	if _, ok := f.(*Request); ok {
		return TypeRequest
	}
	return TypeToolResult
}
