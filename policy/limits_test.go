package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Bytes
		err  string
	}{
		{in: "1048576", want: 1 << 20},
		{in: "512K", want: 512 << 10},
		{in: "512M", want: 512 << 20},
		{in: "2G", want: 2 << 30},
		{in: "9999T", want: 9999 << 40},
		{in: "9999999999999999", want: 9999999999999999},
		{in: "", err: "is not a size"},
		{in: "0M", err: "is not a size"},
		{in: "1.5G", err: "is not a size"},
		{in: "512m", err: "is not a size"},
		{in: "10000T", err: "is not a size"},
		{in: "512MiB", err: "is not a size"},
	} {
		got, err := ParseBytes(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseBytes(%q) = %d, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestBytesString(t *testing.T) {
	for _, c := range []struct {
		in   Bytes
		want string
	}{{512 << 20, "512M"}, {1 << 30, "1G"}, {1536 << 20, "1536M"}, {3 << 40, "3T"}, {4096, "4K"}, {1000, "1000"}, {0, "0"}} {
		if got := c.in.String(); got != c.want {
			t.Errorf("Bytes(%d).String() = %q, want %q", uint64(c.in), got, c.want)
		}
	}
}

func TestParseCPUMax(t *testing.T) {
	for _, c := range []struct {
		in            string
		quota, period uint64
		err           string
	}{
		{in: "50%", quota: 50000, period: 100000},
		{in: "10%", quota: 10000, period: 100000},
		{in: "250%", quota: 250000, period: 100000},
		{in: "1%", quota: 1000, period: 100000},
		{in: "20000/50000", quota: 20000, period: 50000},
		{in: "0%", err: "above 0"},
		{in: "999/100000", err: "at least 1000"},
		{in: "5000/999", err: "period must be"},
		{in: "5000/2000000", err: "period must be"},
		{in: "half", err: "neither"},
	} {
		q, p, err := ParseCPUMax(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseCPUMax(%q) = %d/%d, %v; want an error with %q", c.in, q, p, err, c.err)
			}
			continue
		}
		if err != nil || q != c.quota || p != c.period {
			t.Errorf("ParseCPUMax(%q) = %d/%d, %v; want %d/%d", c.in, q, p, err, c.quota, c.period)
		}
	}
}

// Every app gets tasks_max 512 without asking, and nothing else: a fork
// bomb stops at the default, a memory limit is the entry's to ask for.
func TestParseLimitsDefaults(t *testing.T) {
	m, err := Parse([]byte(`{"version": 1, "apps": [
		{"id": "a", "exec": ["/x"]},
		{"id": "b", "exec": ["/x"], "limits": {"memory_max": "512M", "memory_high": 402653184, "tasks_max": 32, "cpu_weight": 50, "cpu_max": "10%", "io_weight": 300}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Apps[0].Limits, (ResourceLimits{TasksMax: DefaultTasksMax}); got != want {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	want := ResourceLimits{MemoryMax: 512 << 20, MemoryHigh: 384 << 20, TasksMax: 32, CPUWeight: 50, CPUMax: "10%", IOWeight: 300}
	if got := m.Apps[1].Limits; got != want {
		t.Errorf("limits: %+v, want %+v", got, want)
	}
	b, err := json.Marshal(m.Apps[1].Limits)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"memory_max":536870912,"memory_high":402653184,"tasks_max":32,"cpu_weight":50,"cpu_max":"10%","io_weight":300}` {
		t.Errorf("encoded as %s", got)
	}
}
