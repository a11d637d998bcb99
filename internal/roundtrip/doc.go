// Package roundtrip is what the peer and daemon benchmarks share to
// measure a request/answer path against its floor in the same run: a
// loop that keeps N operations in flight and reports their p50, p99 and
// rate (Measure), a socketpair (Socketpair), the floor's far end, which
// decodes and re-encodes each JSON line (EchoJSON), and the plain app's
// answer to a tool_call (ToolResult).
//
// It is test support: only _test.go files import it.
package roundtrip
