package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ResourceLimits are the resources an app's processes may use together, enforced
// by the app's cgroup (docs/limits.md). A zero field is the default:
// DefaultTasksMax tasks (normalize fills it in), no memory limit, the
// kernel's weights (100), no CPU quota.
type ResourceLimits struct {
	// MemoryMax is memory.max: past it the kernel reclaims, then
	// OOM-kills inside the app. MemoryHigh is memory.high: past it the
	// app is throttled and reclaimed hard, never killed.
	MemoryMax  Bytes `json:"memory_max,omitempty"`
	MemoryHigh Bytes `json:"memory_high,omitempty"`
	// TasksMax is pids.max: processes and threads together.
	TasksMax int `json:"tasks_max,omitempty"`
	// CPUWeight and IOWeight are cpu.weight and io.weight (1–10000, the
	// kernel's default 100): shares against the other apps when the CPU
	// or the disk is contended.
	CPUWeight int `json:"cpu_weight,omitempty"`
	// CPUMax is cpu.max as written: "50%" of one CPU, or "quota/period"
	// in microseconds (ParseCPUMax).
	CPUMax   string `json:"cpu_max,omitempty"`
	IOWeight int    `json:"io_weight,omitempty"`
}

// DefaultTasksMax is every app's tasks_max unless its entry says
// otherwise: far above what a desktop app runs (a browser's content
// processes and their threads stay in the low hundreds), low enough that
// a fork bomb stops there instead of at the user's process limit, which
// would take the desktop down with it.
const DefaultTasksMax = 512

// MaxTasks is the largest tasks_max: the kernel's PID_MAX_LIMIT.
const MaxTasks = 4194304

// MinMemory is the smallest memory_max or memory_high a manifest may
// give: less cannot even load a program, so a smaller number is a unit
// left out ("512" meant as "512M").
const MinMemory Bytes = 1 << 20

// Defaults of cpu.weight and io.weight, and cpu.max's period when the
// manifest gives a percentage.
const (
	DefaultWeight    = 100
	DefaultCPUPeriod = 100000
)

// Bytes is a size in bytes. In the manifest it is a whole number of
// bytes, or a string of digits with K, M, G or T (powers of 1024, as
// systemd reads MemoryMax=): "512M".
type Bytes uint64

// sizePattern is the schema's (bytes): the digits a unit allows keep the
// size below 2^64.
var sizePattern = regexp.MustCompile(`^(?:([1-9][0-9]{0,15})()|([1-9][0-9]{0,12})(K)|([1-9][0-9]{0,9})(M)|([1-9][0-9]{0,6})(G)|([1-9][0-9]{0,3})(T))$`)

// ParseBytes reads a size as the manifest writes it in a string.
func ParseBytes(s string) (Bytes, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: up to 16 digits, or fewer with K, M, G or T", s)
	}
	for i := 1; i+1 < len(m); i += 2 {
		if m[i] == "" {
			continue
		}
		n, err := strconv.ParseUint(m[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", s, err)
		}
		var shift uint
		if u := m[i+1]; u != "" {
			shift = uint(strings.Index("KMGT", u)+1) * 10
		}
		return Bytes(n << shift), nil
	}
	return 0, fmt.Errorf("%q is not a size", s)
}

// String is the size the way a person writes it: the largest unit that
// divides it exactly, "512M", else the bytes.
func (b Bytes) String() string {
	for i, unit := range []string{"T", "G", "M", "K"} {
		shift := uint(40 - 10*i)
		if b != 0 && b%(1<<shift) == 0 {
			return strconv.FormatUint(uint64(b)>>shift, 10) + unit
		}
	}
	return strconv.FormatUint(uint64(b), 10)
}

// UnmarshalJSON takes a number of bytes or a size string. It never fails:
// the schema and the rules (validate_rules.go) have checked the value and
// said what is wrong with it, and the best-effort decode of a manifest
// with problems must go on past a bad value; anything else reads as 0.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	*b = 0
	var s string
	if json.Unmarshal(data, &s) == nil {
		if v, err := ParseBytes(s); err == nil {
			*b = v
		}
		return nil
	}
	var n uint64
	if json.Unmarshal(data, &n) == nil {
		*b = Bytes(n)
	}
	return nil
}

// MarshalJSON writes the number of bytes, which reads back as the same
// size.
func (b Bytes) MarshalJSON() ([]byte, error) { return strconv.AppendUint(nil, uint64(b), 10), nil }

// ParseCPUMax reads cpu_max: "N%" of one CPU (over DefaultCPUPeriod; more
// than 100% spans CPUs), or "quota/period" in microseconds. The kernel
// takes quotas of at least 1 ms and periods from 1 ms to 1 s.
func ParseCPUMax(s string) (quota, period uint64, err error) {
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.ParseUint(pct, 10, 32)
		if err != nil || n == 0 {
			return 0, 0, fmt.Errorf("%q is not a whole percentage above 0", s)
		}
		quota, period = n*DefaultCPUPeriod/100, DefaultCPUPeriod
	} else {
		q, p, ok := strings.Cut(s, "/")
		if !ok {
			return 0, 0, fmt.Errorf("%q is neither \"N%%\" nor \"quota/period\"", s)
		}
		if quota, err = strconv.ParseUint(q, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("%q: the quota is not a whole number of microseconds", s)
		}
		if period, err = strconv.ParseUint(p, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("%q: the period is not a whole number of microseconds", s)
		}
	}
	switch {
	case period < 1000 || period > 1000000:
		return 0, 0, fmt.Errorf("%q: the period must be from 1000 to 1000000 microseconds", s)
	case quota < 1000:
		return 0, 0, fmt.Errorf("%q: the quota must be at least 1000 microseconds (1%% of the default period)", s)
	}
	return quota, period, nil
}

// limitsRules checks what the schema cannot: a size string's value,
// memory_high against memory_max, cpu_max's numbers. The schema's size
// pattern keeps every string within 64 bits.
func limitsRules(p jsonPath, l *ResourceLimits, flagged flaggedSet) []finding {
	var out []finding
	for _, f := range []struct {
		name string
		v    Bytes
	}{{"memory_max", l.MemoryMax}, {"memory_high", l.MemoryHigh}} {
		if at := p.child(f.name); f.v != 0 && f.v < MinMemory && !flagged.any(at) {
			out = append(out, finding{at: at, msg: fmt.Sprintf("%s is less than 1M, too little to load a program", f.v),
				fix: `write the unit: "512M", not "512"`})
		}
	}
	if l.MemoryMax >= MinMemory && l.MemoryHigh > l.MemoryMax &&
		!flagged.any(p.child("memory_max"), p.child("memory_high")) {
		out = append(out, finding{at: p.child("memory_high"),
			msg: fmt.Sprintf("%s is above memory_max %s: the app would be killed before it is ever throttled", l.MemoryHigh, l.MemoryMax),
			fix: "set memory_high below memory_max (e.g. 80% of it), or leave it out"})
	}
	if at := p.child("cpu_max"); l.CPUMax != "" && !flagged.any(at) {
		if _, _, err := ParseCPUMax(l.CPUMax); err != nil {
			out = append(out, finding{at: at, msg: err.Error(), fix: `write a share of one CPU like "50%" (or "200%" for two), or "quota/period" in microseconds like "50000/100000"`})
		}
	}
	return out
}
