package frame

import "testing"

// The hub lines of the bench's tools and requests sections (bench/toolapp
// writes them), decoded as the daemon decodes every line an app writes.
var benchLines = []struct{ name, line string }{
	{"tool_result", `{"octos_peer":{"type":"tool_result","call_id":"b12345","ok":true,"data":{}}}`},
	{"request", `{"octos_peer":{"type":"request","req_id":"q1.12345","method":"octos.turn.interrupt","args":{"context_id":"ctx-0123456789abcdef","turn_id":"t"}}}`},
	{"tool_result_error", `{"octos_peer":{"type":"tool_result","call_id":"b12345","ok":false,"error":{"code":"internal","message":"no such note"}}}`},
	{"passthrough", `{"ui":"set_title","title":"Notes","id":7}`},
}

func BenchmarkParseLine(b *testing.B) {
	for _, bl := range benchLines {
		line := []byte(bl.line)
		b.Run(bl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, _, err := ParseLine(line); err != nil { // a pass-through line is up nil
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRequestArgs is ParseLine and then the request's args, as the
// Manager reads an app's request.
func BenchmarkRequestArgs(b *testing.B) {
	line := []byte(benchLines[1].line)
	b.ReportAllocs()
	for b.Loop() {
		up, _, err := ParseLine(line)
		if err != nil {
			b.Fatal(err)
		}
		r := up.(*Request)
		if _, err := DecodeArgs(r.Method, r.Args); err != nil {
			b.Fatal(err)
		}
	}
}
