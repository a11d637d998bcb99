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
