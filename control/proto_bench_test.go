package control

import "testing"

// The control lines of the bench's tools and requests sections (a
// kernel's tool.call and request.reply), decoded as the daemon decodes
// every request line.
var benchRequests = []struct{ name, line string }{
	{"tool.call", `{"id":1234,"op":"tool.call","args":{"app":"tools","call":{"call_id":"b12345","name":"bench.echo","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":"ctx-0123456789abcdef","caller":"bench"}}}`},
	{"request.reply", `{"id":1234,"op":"request.reply","args":{"app":"tools","req_id":"q1.12345","ok":true,"data":{}}}`},
}

func BenchmarkDecodeRequest(b *testing.B) {
	for _, br := range benchRequests {
		line := []byte(br.line)
		b.Run(br.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := DecodeRequest(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkToolCall is a tool.call line read whole, as the daemon reads
// it: the request, then its args (Request.ToolCallArgs).
func BenchmarkToolCall(b *testing.B) {
	line := []byte(benchRequests[0].line)
	b.ReportAllocs()
	for b.Loop() {
		req, err := DecodeRequest(line)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := toolCallArgs(req); err != nil {
			b.Fatal(err)
		}
	}
}
