package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
)

// OpDebug reports the daemon's own footprint for leak checks (make
// chaos): args DebugArgs, answer DebugData. (It belongs in package
// control.)
const OpDebug = "debug"

// DebugArgs are debug's args. GC first collects and returns freed memory
// to the kernel, so rss_bytes and heap_bytes say what is live.
type DebugArgs struct {
	GC bool `json:"gc,omitempty"`
}

// DebugData is debug's answer.
type DebugData struct {
	Goroutines int    `json:"goroutines"`
	Threads    int    `json:"threads"`   // the process's OS threads
	FDs        int    `json:"fds"`       // open file descriptors
	RSSBytes   int64  `json:"rss_bytes"` // resident set size (VmRSS)
	HeapBytes  uint64 `json:"heap_bytes"`
}

// heapObjects is the heap of live objects and dead ones not yet swept
// (none right after a GC).
const heapObjects = "/memory/classes/heap/objects:bytes"

func (s *Server) opDebug(_ context.Context, _ *Conn, args DebugArgs) (any, error) {
	if args.GC {
		debug.FreeOSMemory()
	}
	d := DebugData{Goroutines: runtime.NumGoroutine()}
	sample := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		d.HeapBytes = sample[0].Value.Uint64()
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return d, fmt.Errorf("debug: read /proc/self/status: %w", err)
	}
	rssKiB, threads, err := parseStatus(status)
	if err != nil {
		return d, fmt.Errorf("debug: /proc/self/status: %w", err)
	}
	d.RSSBytes, d.Threads = rssKiB<<10, threads
	// Less ReadDir's own descriptor.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return d, fmt.Errorf("debug: list /proc/self/fd: %w", err)
	}
	d.FDs = len(fds) - 1
	return d, nil
}

// parseStatus takes VmRSS (KiB) and Threads from /proc/PID/status.
func parseStatus(b []byte) (rssKiB int64, threads int, err error) {
	seen := 0
	for line := range bytes.Lines(b) {
		k, v, _ := bytes.Cut(line, []byte(":")) // no colon: no fields, no match
		f := bytes.Fields(v)
		switch {
		case string(k) == "VmRSS" && len(f) == 2 && string(f[1]) == "kB":
			rssKiB, err = strconv.ParseInt(string(f[0]), 10, 64)
			seen |= 1
		case string(k) == "Threads" && len(f) == 1:
			threads, err = strconv.Atoi(string(f[0]))
			seen |= 2
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", k, err)
		}
	}
	if seen != 3 {
		return 0, 0, fmt.Errorf("no VmRSS or Threads line")
	}
	return rssKiB, threads, nil
}
