package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of the table: a distribution (N, P50, P99), a single
// Value, or a Ratio of two figures measured in the same run, with the
// goal it is held against. Key is stable for scripts ("spawn.jail",
// "spawn.ratio.jail/plain"); Label is for people.
type Row struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	N     int    `json:"n,omitempty"`
	P50   *Value `json:"p50,omitempty"`
	P99   *Value `json:"p99,omitempty"`
	Value *Value `json:"value,omitempty"`
	Ratio *Ratio `json:"ratio,omitempty"`
	// Goal is checked against Ratio when there is one, else Value. It is
	// reported, never enforced: a missed goal does not fail the run.
	Goal *Goal  `json:"goal,omitempty"`
	Note string `json:"note,omitempty"`
	// Err says why the row has no figure (a variant that failed or was
	// skipped).
	Err string `json:"error,omitempty"`
}

// Value is a number with its unit. Durations are in milliseconds.
type Value struct {
	X    float64 `json:"x"`
	Unit string  `json:"unit"`
}

// Ms is a duration as a Value in milliseconds.
func Ms(d time.Duration) *Value {
	return &Value{X: float64(d) / float64(time.Millisecond), Unit: "ms"}
}

func (v *Value) String() string {
	if v == nil {
		return ""
	}
	switch v.Unit {
	case "ms":
		return fmtMs(v.X)
	case "×":
		return fmt.Sprintf("%.2f×", v.X)
	default:
		return fmt.Sprintf("%s %s", fmtNum(v.X), v.Unit)
	}
}

func fmtMs(ms float64) string {
	switch {
	case ms < 1:
		return fmt.Sprintf("%.0fµs", ms*1000)
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fs", ms/1000)
	}
}

func fmtNum(x float64) string {
	switch {
	case x == math.Trunc(x) && math.Abs(x) < 1e9:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) < 1:
		return fmt.Sprintf("%.3f", x)
	case math.Abs(x) < 10:
		return fmt.Sprintf("%.2f", x)
	case math.Abs(x) < 100:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

// Ratio is Num/Den of two figures of the same run, e.g. Expr "c/a p50".
type Ratio struct {
	Expr string  `json:"expr"`
	X    float64 `json:"x"`
}

// Goal is "≤ X" or "≥ X" in the unit of what it is checked against.
type Goal struct {
	Op   string  `json:"op"` // "<=" or ">="
	X    float64 `json:"x"`
	Unit string  `json:"unit"`
	Met  bool    `json:"met"`
}

// AtMost and AtLeast make goals; check fills Met.
func AtMost(x float64, unit string) *Goal  { return &Goal{Op: "<=", X: x, Unit: unit} }
func AtLeast(x float64, unit string) *Goal { return &Goal{Op: ">=", X: x, Unit: unit} }

func (g *Goal) check(x float64) {
	switch g.Op {
	case "<=":
		g.Met = x <= g.X
	case ">=":
		g.Met = x >= g.X
	}
}

func (g *Goal) String() string {
	if g == nil {
		return ""
	}
	op := "≤"
	if g.Op == ">=" {
		op = "≥"
	}
	verdict := "met"
	if !g.Met {
		verdict = "MISSED"
	}
	v := Value{X: g.X, Unit: g.Unit}
	return fmt.Sprintf("%s %s  %s", op, v.String(), verdict)
}

// finish checks the row's goal against its headline figure.
func (r *Row) finish() {
	if r.Goal == nil {
		return
	}
	switch {
	case r.Ratio != nil:
		r.Goal.check(r.Ratio.X)
	case r.Value != nil:
		r.Goal.check(r.Value.X)
	default:
		r.Goal = nil // nothing measured: nothing to hold against it
	}
}

// ratioRow is the row num/den of the p50s (or the values) of two rows of
// the same run. Either side missing gives a row saying so.
func ratioRow(key, label, expr string, num, den Row, goal *Goal) Row {
	r := Row{Key: key, Label: label, Goal: goal}
	n, d := headline(num), headline(den)
	switch {
	case num.Err != "" || n == nil:
		r.Err = "no figure for " + num.Key
	case den.Err != "" || d == nil:
		r.Err = "no figure for " + den.Key
	case d.X == 0:
		r.Err = den.Key + " is 0"
	default:
		r.Ratio = &Ratio{Expr: expr, X: n.X / d.X}
	}
	r.finish()
	return r
}

// headline is what a ratio takes from a row: its median, else its value.
func headline(r Row) *Value {
	if r.P50 != nil {
		return r.P50
	}
	return r.Value
}

// Section is one measurement's rows.
type Section struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	About string `json:"about,omitempty"`
	Rows  []Row  `json:"rows"`
	// Err is why the measurement stopped early; the rows it had are kept.
	Err      string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Report is the whole run: what --json prints.
type Report struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Machine  Machine       `json:"machine"`
	Sections []Section     `json:"sections"`
}

// Machine is what the figures depend on besides the code.
type Machine struct {
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	Go          string `json:"go"`
	LoadStart   string `json:"loadavg_start"`
	LoadEnd     string `json:"loadavg_end"`
	LandlockABI int    `json:"landlock_abi"`
	Bwrap       string `json:"bwrap,omitempty"`
}

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}

// writeTable prints the report for a person: one table, a block per
// section.
func writeTable(w io.Writer, rep *Report) error {
	m := rep.Machine
	fmt.Fprintf(w, "octosup bench, %s; %d CPUs, kernel %s, %s, Landlock ABI %d; load %s → %s; %s\n",
		rep.Started.UTC().Format(time.RFC3339), m.CPUs, m.Kernel, m.Go, m.LandlockABI, m.LoadStart, m.LoadEnd,
		rep.Duration.Round(time.Second))
	fmt.Fprintln(w, "Every ratio is of two figures measured in this run; absolute times are reported, never asserted.")
	// Into a buffer first: the padding of empty last cells is trimmed.
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	for _, s := range rep.Sections {
		// No tab: a header is not a cell, so it does not widen a column.
		fmt.Fprintf(tw, "\n%s: %s\n", s.Name, s.Title)
		// A line without cells ends a column block: each section has its
		// own header and its own column widths.
		fmt.Fprintln(tw, "  figure\tn\tp50\tp99\tvalue / ratio\tgoal")
		for _, r := range s.Rows {
			n := ""
			if r.N > 0 {
				n = fmt.Sprint(r.N)
			}
			val := r.Value.String()
			if r.Ratio != nil {
				val = join(val, fmt.Sprintf("%s = %.2f×", r.Ratio.Expr, r.Ratio.X))
			}
			if r.Err != "" {
				val = "— " + r.Err
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", r.Label, n, r.P50.String(), r.P99.String(), val, r.Goal.String())
		}
		if s.Err != "" {
			fmt.Fprintf(tw, "  FAILED: %s\n", oneLine(s.Err))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		if _, err := io.WriteString(w, strings.TrimRight(line, " ")+"\n"); err != nil {
			return err
		}
	}
	var notes []string
	for _, s := range rep.Sections {
		for _, r := range s.Rows {
			if r.Note != "" {
				notes = append(notes, fmt.Sprintf("  %s: %s", r.Label, r.Note))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n"))
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
