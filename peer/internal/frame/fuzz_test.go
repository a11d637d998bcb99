package frame

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func addGoldenSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/golden/*.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzReadFrame feeds arbitrary streams through the Reader with a small
// cap: it must never panic, never return a line over the cap or holding a
// newline, and every line it returns must classify without panicking.
func FuzzReadFrame(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte("\n\n\n"))
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"))
	f.Add(bytes.Repeat([]byte("x"), 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 64
		r := NewReader(&chunkReader{data: data, n: 7}, max)
		total := 0
		for {
			line, err := r.Next()
			if err == io.EOF {
				break
			}
			if errors.Is(err, ErrFrameTooLong) {
				continue
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if len(line) > max || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("bad line %q", line)
			}
			total += len(line) + 1
			ParseLine(line)
		}
		if total > len(data) {
			t.Fatalf("returned %d bytes from %d", total, len(data))
		}
	})
}

// FuzzDecodeUp decodes arbitrary lines as app frames: no panic, and any
// accepted frame re-encodes to a line that decodes to the same encoding.
func FuzzDecodeUp(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"octos_peer":{"type":"request","req_id":"r","method":"m","args":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c","ok":false,"error":{"code":"x","message":"y"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		up, err := DecodeUp(line)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FrameError", err)
			}
			return
		}
		once, err := EncodeUp(up)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, err := DecodeUp(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		twice, err := EncodeUp(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q (%v)", once, twice, err)
		}
	})
}

// FuzzDecodeDown does the same for daemon frames, which Go apps decode.
func FuzzDecodeDown(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		d, err := DecodeDown(line)
		if err != nil {
			return
		}
		once, err := EncodeDown(d)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, err := DecodeDown(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		if twice, _ := EncodeDown(again); !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q", once, twice)
		}
	})
}
