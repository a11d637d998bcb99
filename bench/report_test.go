package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(n-i) * time.Millisecond // reversed: summarize sorts
		}
		return d
	}
	for _, c := range []struct {
		name     string
		samples  []time.Duration
		p50, p99 time.Duration
	}{
		{"200 samples: p99 is the 198th", seq(200), 100 * time.Millisecond, 198 * time.Millisecond},
		{"one sample", seq(1), time.Millisecond, time.Millisecond},
		{"two samples", seq(2), time.Millisecond, 2 * time.Millisecond},
		{"201 samples", seq(201), 101 * time.Millisecond, 199 * time.Millisecond},
		{"1000 samples", seq(1000), 500 * time.Millisecond, 990 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := append([]time.Duration(nil), c.samples...)
			s := summarize(c.samples)
			if s.P50 != c.p50 || s.P99 != c.p99 {
				t.Errorf("p50 %v p99 %v, want %v %v", s.P50, s.P99, c.p50, c.p99)
			}
			if s.N != len(c.samples) || s.Min != time.Millisecond {
				t.Errorf("n %d min %v", s.N, s.Min)
			}
			for i := range before {
				if before[i] != c.samples[i] {
					t.Fatal("summarize changed its input")
				}
			}
		})
	}
	if s := summarize(nil); s.N != 0 {
		t.Errorf("summarize(nil) = %+v", s)
	}
}

func TestRatioRow(t *testing.T) {
	dist := func(key string, p50 time.Duration) Row { return Row{Key: key, N: 10, P50: Ms(p50), P99: Ms(2 * p50)} }
	for _, c := range []struct {
		name     string
		num, den Row
		goal     *Goal
		ratio    float64 // 0: no ratio
		err      string
		met      *bool
	}{
		{"goal met", dist("c", 3*time.Millisecond), dist("a", 2*time.Millisecond), AtMost(2, "×"), 1.5, "", ptr(true)},
		{"goal missed", dist("c", 10*time.Millisecond), dist("a", 2*time.Millisecond), AtMost(2, "×"), 5, "", ptr(false)},
		{"at least", dist("x", 1*time.Millisecond), dist("y", 4*time.Millisecond), AtLeast(0.35, "×"), 0.25, "", ptr(false)},
		{"values", Row{Key: "v", Value: &Value{X: 50, Unit: "KiB"}}, Row{Key: "w", Value: &Value{X: 25, Unit: "KiB"}}, nil, 2, "", nil},
		{"numerator failed", Row{Key: "c", Err: "boom"}, dist("a", time.Millisecond), AtMost(2, "×"), 0, "no figure for c", nil},
		{"denominator missing", dist("c", time.Millisecond), Row{Key: "d"}, nil, 0, "no figure for d", nil},
		{"denominator zero", dist("c", time.Millisecond), dist("z", 0), nil, 0, "z is 0", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ratioRow("k", "label", "c/a p50", c.num, c.den, c.goal)
			if c.ratio == 0 {
				if r.Ratio != nil || r.Err != c.err {
					t.Fatalf("ratio %+v err %q, want none and %q", r.Ratio, r.Err, c.err)
				}
				if r.Goal != nil {
					t.Errorf("a goal is judged without a figure: %+v", r.Goal)
				}
				return
			}
			if r.Ratio == nil || r.Ratio.X != c.ratio || r.Err != "" {
				t.Fatalf("ratio %+v err %q, want %v", r.Ratio, r.Err, c.ratio)
			}
			if c.met != nil && (r.Goal == nil || r.Goal.Met != *c.met) {
				t.Errorf("goal %+v, want met=%v", r.Goal, *c.met)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestValueString(t *testing.T) {
	for _, c := range []struct {
		v    Value
		want string
	}{
		{*Ms(450 * time.Microsecond), "450µs"},
		{*Ms(2345 * time.Microsecond), "2.35ms"},
		{*Ms(23450 * time.Microsecond), "23.4ms"},
		{*Ms(234 * time.Millisecond), "234ms"},
		{*Ms(2500 * time.Millisecond), "2.50s"},
		{Value{X: 12224, Unit: "KiB"}, "12224 KiB"},
		{Value{X: 0.4, Unit: "threads/app"}, "0.400 threads/app"},
		{Value{X: 1.5, Unit: "×"}, "1.50×"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
	}
}

func sampleReport() *Report {
	a := Row{Key: "spawn.plain", Label: "a   plain", N: 200, P50: Ms(time.Millisecond), P99: Ms(3 * time.Millisecond)}
	c := Row{Key: "spawn.jail", Label: "c   jailed", N: 200, P50: Ms(9 * time.Millisecond), P99: Ms(20 * time.Millisecond), Note: "a note"}
	return &Report{
		Started: time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC),
		Machine: Machine{Kernel: "6.18", CPUs: 2, Go: "go1.26", LandlockABI: 7, LoadStart: "1 1 1", LoadEnd: "2 2 2"},
		Sections: []Section{{
			Name: "spawn", Title: "start → first byte",
			Rows: []Row{a, c, ratioRow("spawn.ratio.c/a", "jailed vs plain", "c/a p50", c, a, AtMost(2, "×")),
				{Key: "spawn.bwrap", Label: "d   bwrap", Err: "skipped: bwrap not installed"}},
		}, {Name: "crash", Title: "kill", Err: "octosupd, kill 3: no stopped event"}},
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"spawn: start → first byte",
		"c/a p50 = 9.00×",
		"≤ 2.00×  MISSED",
		"— skipped: bwrap not installed",
		"FAILED: octosupd, kill 3: no stopped event",
		"c   jailed: a note",
		"Landlock ABI 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("--json is not JSON: %v\n%s", err, b.String())
	}
	r := back.Sections[0].Rows[2]
	if r.Ratio == nil || r.Ratio.X != 9 || r.Goal == nil || r.Goal.Met || r.Goal.Op != "<=" {
		t.Errorf("ratio row after a round trip: %+v", r)
	}
	if back.Sections[0].Rows[0].P50.Unit != "ms" || back.Sections[0].Rows[0].P50.X != 1 {
		t.Errorf("p50 of the first row: %+v", back.Sections[0].Rows[0].P50)
	}
}

func TestParseSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"10,100,500", []int{10, 100, 500}, true},
		{" 7 , 8 ,", []int{7, 8}, true},
		{"", nil, false},
		{"0", nil, false},
		{"10,x", nil, false},
		{"-3", nil, false},
		{"5001", nil, false},
	} {
		got, err := parseSizes(c.in)
		if (err == nil) != c.ok || len(got) != len(c.want) {
			t.Errorf("parseSizes(%q) = %v, %v", c.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("parseSizes(%q) = %v", c.in, got)
			}
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	f, err := os.Open("testdata/proc-status.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rss, threads, err := parseProcStatus(bufio.NewScanner(f))
	if err != nil || rss != 1724 || threads != 1 {
		t.Errorf("got %d KiB, %d threads, %v; want 1724, 1", rss, threads, err)
	}
	for _, bad := range []string{"", "Name:\tx\nThreads:\t3\n", "VmRSS:\t12 MB\nThreads:\t3\n", "VmRSS:\tx kB\nThreads:\t3\n"} {
		if _, _, err := parseProcStatus(bufio.NewScanner(strings.NewReader(bad))); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// Our own process: what the scale section reads of the daemon.
	if rss, threads, err := procStatus(os.Getpid()); err != nil || rss <= 0 || threads <= 0 {
		t.Errorf("procStatus(self) = %d, %d, %v", rss, threads, err)
	}
}

func FuzzParseProcStatus(f *testing.F) {
	if b, err := os.ReadFile("testdata/proc-status.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("VmRSS:\t1 kB\nThreads:\t2\n")
	f.Add("VmRSS:\t-1 kB\nThreads:\t99999999999999999999\n")
	f.Fuzz(func(t *testing.T, s string) {
		rss, threads, err := parseProcStatus(bufio.NewScanner(strings.NewReader(s)))
		if err != nil && (rss != 0 || threads != 0) {
			t.Errorf("an error with figures: %d %d %v", rss, threads, err)
		}
	})
}

func TestGoroutineHeader(t *testing.T) {
	b, err := os.ReadFile("testdata/sigquit.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Goroutines 1–4 of a real dump of octosupd; goroutine 0 is the
	// signal handler's g0 and "created by … in goroutine 1" is no header.
	if n := len(goroutineHeader.FindAll(b, -1)); n != 4 {
		t.Errorf("%d goroutines, want 4", n)
	}
	old := "goroutine 12 [select]:\nmain.f()\ngoroutine 13 [IO wait, 2 minutes]:\n"
	if n := len(goroutineHeader.FindAll([]byte(old), -1)); n != 2 {
		t.Errorf("the pre-1.23 format: %d goroutines, want 2", n)
	}
}
