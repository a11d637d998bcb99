package frametest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"octosup/peer/internal/frame"
)

// TestGoldenRoundTrip decodes every golden frame and re-encodes it: the
// bytes must come back exactly, in both directions, each direction
// through both implementations (the daemon's frame decodes up frames and
// encodes down ones, this package the other way).
func TestGoldenRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			line := bytes.TrimSuffix(want, []byte("\n"))
			var got []byte
			if strings.HasPrefix(filepath.Base(file), "up_") {
				f, _, err := frame.ParseLine(line)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				seen[upType(f)] = true
				got, err = EncodeUp(f)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
			} else {
				f, err := DecodeDown(line)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				seen[downType(f)] = true
				got, err = frame.EncodeDown(f)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("re-encoded\n got %s\nwant %s", got, want)
			}
		})
	}
	for _, typ := range []string{frame.TypeRequest, frame.TypeToolResult, frame.TypeReply, frame.TypeEvent, frame.TypeToolCall, frame.TypeToolCancel, frame.TypeContextClosed, frame.TypeError} {
		if !seen[typ] {
			t.Errorf("no golden file for frame type %s", typ)
		}
	}
}

func upType(f frame.Up) string {
	if _, ok := f.(*frame.Request); ok {
		return frame.TypeRequest
	}
	return frame.TypeToolResult
}

// downType is the type member EncodeDown writes for f.
func downType(f frame.Down) string {
	b, _ := frame.EncodeDown(f)
	var v struct {
		P struct {
			Type string `json:"type"`
		} `json:"octos_peer"`
	}
	_ = json.Unmarshal(b, &v)
	return v.P.Type
}

func addGoldenSeeds(f *testing.F) {
	files, _ := filepath.Glob("../testdata/golden/*.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzDecodeUp decodes arbitrary lines as app frames: no panic, and any
// accepted frame re-encodes to a line that decodes to the same encoding.
func FuzzDecodeUp(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(`{"octos_peer":{"type":"request","req_id":"r","method":"m","args":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"octos_peer":{"type":"tool_result","call_id":"c","ok":false,"error":{"code":"x","message":"y"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		up, pass, err := frame.ParseLine(line)
		if err != nil || pass {
			return
		}
		once, err := EncodeUp(up)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, pass, err := frame.ParseLine(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil || pass {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		twice, err := EncodeUp(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q (%v)", once, twice, err)
		}
	})
}

// FuzzDecodeDown does the same for daemon frames: what this package
// accepts, the daemon's encoder writes, and the bytes are stable.
func FuzzDecodeDown(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		d, err := DecodeDown(line)
		if err != nil {
			return
		}
		once, err := frame.EncodeDown(d)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode: %v", line, err)
		}
		again, err := DecodeDown(bytes.TrimSuffix(once, []byte("\n")))
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", once, err)
		}
		if twice, _ := frame.EncodeDown(again); !bytes.Equal(once, twice) {
			t.Fatalf("not stable: %q vs %q", once, twice)
		}
	})
}
