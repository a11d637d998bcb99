package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is what an app's leaf counts: read when Supervisor.Usage is
// asked, never on a timer, so that an idle daemon does no work while
// nobody looks.
type Usage struct {
	// CPUUsec is the CPU time the app's processes used, from cpu.stat
	// (kept by every cgroup v2, with or without the cpu controller).
	CPUUsec uint64 `json:"cpu_usec"`
	// MemoryCurrent and MemoryPeak are memory.current and memory.peak
	// (Linux 5.19), with the memory controller; without it MemoryRSS is
	// the sum of its processes' resident sets instead.
	MemoryCurrent uint64 `json:"memory_current,omitempty"`
	MemoryPeak    uint64 `json:"memory_peak,omitempty"`
	MemoryRSS     uint64 `json:"memory_rss,omitempty"`
	// Tasks is pids.current, or the leaf's threads counted without the
	// pids controller.
	Tasks int `json:"tasks"`
	// At is when the counters were read: the interval between two reads
	// turns CPUUsec into a share of a CPU.
	At time.Time `json:"at"`
}

// readUsage reads the counters of the leaf at dir; nil when the leaf is
// gone (the process ended between the status copy and the read).
func readUsage(dir string, now time.Time) *Usage {
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return nil
	}
	u := &Usage{At: now}
	u.CPUUsec, _ = keyed(stat, "usage_usec")
	if v, ok := readUint(filepath.Join(dir, "memory.current")); ok {
		u.MemoryCurrent = v
		u.MemoryPeak, _ = readUint(filepath.Join(dir, "memory.peak"))
	} else {
		u.MemoryRSS = residentSum(filepath.Join(dir, "cgroup.procs"))
	}
	if v, ok := readUint(filepath.Join(dir, "pids.current")); ok {
		u.Tasks = int(v)
	} else if b, err := os.ReadFile(filepath.Join(dir, "cgroup.threads")); err == nil {
		u.Tasks = bytes.Count(b, []byte("\n"))
	}
	return u
}

// keyed finds "key N" in a flat keyed file (cpu.stat, memory.events,
// pids.events).
func keyed(b []byte, key string) (uint64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readUint reads a file that holds one number.
func readUint(file string) (uint64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// residentSum adds up the resident set of each process in a cgroup.procs
// file (statm's second field, in pages).
func residentSum(procs string) uint64 {
	b, err := os.ReadFile(procs)
	if err != nil {
		return 0
	}
	page := uint64(os.Getpagesize())
	var sum uint64
	for pid := range strings.FieldsSeq(string(b)) {
		statm, err := os.ReadFile("/proc/" + pid + "/statm")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(statm)); len(f) >= 2 {
			if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				sum += n * page
			}
		}
	}
	return sum
}

// oomKills is memory.events's oom_kill of the leaf at dir: how many of
// its processes an OOM killer took (0 without the memory controller).
func oomKills(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0
	}
	n, _ := keyed(b, "oom_kill")
	return n
}
