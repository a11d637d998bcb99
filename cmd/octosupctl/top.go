package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"octosup/control"
)

// top is a live view of the apps' resources: what status --json gives
// (state, the cgroup's usage, calls in flight) and the pending approvals,
// read once per interval. The daemon reads the counters only when asked,
// so it works only while a top (or a status) asks; CPU % is the change of
// cpu_usec between two reads over the time between them.
//
// The terminal side is bubbletea (github.com/charmbracelet/bubbletea):
// it owns the raw mode, the alternate screen, resizes and keys, and keeps
// the view a pure function of the model, which is what the golden tests
// render.

// topSortKeys are the orders top offers, by the key that picks each.
var topSortKeys = []struct{ key, name string }{{"c", "cpu"}, {"m", "mem"}, {"t", "tasks"}, {"a", "app"}}

func (c *cli) topCommand() *cobra.Command {
	var once bool
	var interval time.Duration
	var sortBy string
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of the apps: state, CPU, memory, tasks, calls in flight, pending approvals",
		Long: `A live view of the apps, refreshed every --interval: state, CPU (% of one
CPU over the last interval), memory (the cgroup's, or the resident sets
where the daemon has no memory controller), tasks, tool calls in flight and
pending approvals. Keys: c, m, t, a sort by CPU, memory, tasks or app; q
quits. --once prints one frame (two reads --interval apart) for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.ContainsFunc(topSortKeys, func(k struct{ key, name string }) bool { return k.name == sortBy }) {
				return &exitError{code: exitUsage, err: fmt.Errorf("top --sort %q: want cpu, mem, tasks or app", sortBy)}
			}
			if interval <= 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("top --interval %s: want a positive duration", interval)}
			}
			if once {
				return c.topOnce(cmd.Context(), interval, sortBy)
			}
			if c.json {
				return &exitError{code: exitUsage, err: errors.New("top --json needs --once: the live view is for a terminal")}
			}
			if !isTerminal(cmd.InOrStdin()) || !isTerminal(c.stdout) {
				return &exitError{code: exitUsage, err: errors.New("top: the live view needs a terminal (stdin and stdout); use top --once for one frame, or top --once --json")}
			}
			m := topModel{ctx: cmd.Context(), cli: c, interval: interval, sortBy: sortBy, width: 80}
			_, err := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(cmd.Context()),
				tea.WithInput(cmd.InOrStdin()), tea.WithOutput(unwrapWriter(c.stdout))).Run()
			if err != nil && !errors.Is(err, tea.ErrProgramKilled) {
				return &exitError{code: exitFailed, err: fmt.Errorf("top: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between two reads")
	cmd.Flags().StringVar(&sortBy, "sort", "cpu", "cpu, mem, tasks or app")
	return cmd
}

// topSample is one read of the daemon.
type topSample struct {
	apps    []control.AppStatus
	pending map[string]int // pending approvals by app
}

func (c *cli) topSample(ctx context.Context) (topSample, error) {
	conn, err := c.client().Connect(ctx)
	if err != nil {
		return topSample{}, err
	}
	defer conn.Close()
	var st control.StatusData
	if err := conn.Do(ctx, control.OpStatus, control.StatusArgs{Usage: true}, &st); err != nil {
		return topSample{}, err
	}
	var ap control.ApprovalsData
	if err := conn.Do(ctx, control.OpApprovals, struct{}{}, &ap); err != nil {
		return topSample{}, err
	}
	s := topSample{apps: st.Apps, pending: map[string]int{}}
	for _, a := range ap.Approvals {
		if a.State == "pending" {
			s.pending[a.App]++
		}
	}
	return s, nil
}

func (c *cli) topOnce(ctx context.Context, interval time.Duration, sortBy string) error {
	first, err := c.topSample(ctx)
	if err != nil {
		return opError("top", err)
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return opError("top", ctx.Err())
	}
	second, err := c.topSample(ctx)
	if err != nil {
		return opError("top", err)
	}
	rows := topRows(first, second)
	if c.json {
		sortRows(rows, sortBy)
		out := make([]topJSON, 0, len(rows))
		for _, r := range rows {
			j := topJSON{App: r.id, State: r.state, Calls: r.calls, Approvals: r.approvals}
			if r.cpu >= 0 {
				j.CPUPercent = &r.cpu
			}
			if r.mem > 0 {
				j.MemoryBytes = &r.mem
			}
			if r.tasks >= 0 {
				j.Tasks = &r.tasks
			}
			out = append(out, j)
		}
		return c.printJSON(out)
	}
	fmt.Fprint(c.stdout, renderTop(rows, sortBy, 0, ""))
	return nil
}

// topJSON is one app of top --once --json; a figure that is not known
// is left out.
type topJSON struct {
	App         string   `json:"app"`
	State       string   `json:"state"`
	CPUPercent  *float64 `json:"cpu_percent,omitempty"`
	MemoryBytes *uint64  `json:"memory_bytes,omitempty"`
	Tasks       *int     `json:"tasks,omitempty"`
	Calls       int      `json:"calls"`
	Approvals   int      `json:"approvals"`
}

// isTerminal says whether v is a file on a terminal.
func isTerminal(v any) bool {
	if w, ok := v.(io.Writer); ok {
		v = unwrapWriter(w)
	}
	f, ok := v.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// topRow is one app's line.
type topRow struct {
	id, state string
	cpu       float64 // % of one CPU; < 0: not known
	mem       uint64  // bytes; 0: not known
	tasks     int     // < 0: not known
	calls     int
	approvals int
}

// topRows turns two reads into the apps' lines, in the daemon's order.
// An app's CPU is known when both reads have its usage, of the same
// process, in time order.
func topRows(prev, cur topSample) []topRow {
	before := map[string]control.AppStatus{}
	for _, a := range prev.apps {
		before[a.ID] = a
	}
	rows := make([]topRow, 0, len(cur.apps))
	for _, a := range cur.apps {
		r := topRow{id: a.ID, state: a.State, cpu: -1, tasks: -1, calls: a.Link.OutstandingCalls, approvals: cur.pending[a.ID]}
		if u := a.Usage; u != nil {
			r.tasks = u.Tasks
			r.mem = u.MemoryCurrent
			if r.mem == 0 {
				r.mem = u.MemoryRSS
			}
			if p, ok := before[a.ID]; ok && p.Usage != nil && p.Pid == a.Pid && u.At.After(p.Usage.At) && u.CPUUsec >= p.Usage.CPUUsec {
				r.cpu = float64(u.CPUUsec-p.Usage.CPUUsec) / float64(u.At.Sub(p.Usage.At).Microseconds()) * 100
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// sortRows orders rows by sortBy, the largest first (app: by id), ties
// by id.
func sortRows(rows []topRow, sortBy string) {
	slices.SortStableFunc(rows, func(a, b topRow) int {
		var c int
		switch sortBy {
		case "cpu":
			c = cmpDesc(a.cpu, b.cpu)
		case "mem":
			c = cmpDesc(a.mem, b.mem)
		case "tasks":
			c = cmpDesc(a.tasks, b.tasks)
		}
		if c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
}

func cmpDesc[T int | uint64 | float64](a, b T) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

var topHeader = []string{"APP", "STATE", "CPU%", "MEM", "TASKS", "CALLS", "APPROVALS"}

// renderTop is one frame: a title, the header and a line per app sorted
// by sortBy, in columns; at most width cells a line when width > 0. help
// is the key line of the live view ("" for --once).
func renderTop(rows []topRow, sortBy string, width int, help string) string {
	sortRows(rows, sortBy)
	cells := [][]string{topHeader}
	for _, r := range rows {
		cells = append(cells, []string{control.Visible(r.id), control.Visible(r.state), percent(r.cpu), size(r.mem), count(r.tasks),
			fmt.Sprint(r.calls), fmt.Sprint(r.approvals)})
	}
	widths := make([]int, len(topHeader))
	for _, line := range cells {
		for i, cell := range line {
			widths[i] = max(widths[i], len(cell))
		}
	}
	var b strings.Builder
	apps := "apps"
	if len(rows) == 1 {
		apps = "app"
	}
	fmt.Fprintf(&b, "octosup top: %d %s, by %s\n", len(rows), apps, sortBy)
	if help != "" {
		b.WriteString(help + "\n")
	}
	for _, line := range cells {
		var l strings.Builder
		for i, cell := range line {
			if i > 0 {
				l.WriteString("  ")
			}
			// Text left, numbers right, as top does.
			if i < 2 {
				fmt.Fprintf(&l, "%-*s", widths[i], cell)
			} else {
				fmt.Fprintf(&l, "%*s", widths[i], cell)
			}
		}
		s := strings.TrimRight(l.String(), " ")
		if width > 0 && len(s) > width {
			s = s[:width]
		}
		b.WriteString(s + "\n")
	}
	if len(rows) == 0 {
		b.WriteString("no apps in the manifest\n")
	}
	return b.String()
}

func percent(p float64) string {
	if p < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", p)
}

func count(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// size is bytes for a person: 980K, 12.5M, 1.2G.
func size(b uint64) string {
	if b == 0 {
		return "-"
	}
	units := []string{"K", "M", "G", "T"}
	v := float64(b) / 1024
	u := 0
	for v >= 1000 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v < 10 {
		return fmt.Sprintf("%.1f%s", v, units[u])
	}
	return fmt.Sprintf("%.0f%s", v, units[u])
}

// topModel is the live view's state (bubbletea's Model).
type topModel struct {
	ctx       context.Context
	cli       *cli
	interval  time.Duration
	sortBy    string
	width     int
	prev, cur topSample
	read      bool // cur holds a read
	err       error
}

type sampleMsg struct {
	s   topSample
	err error
}

type tickMsg struct{}

func (m topModel) fetch() tea.Msg {
	s, err := m.cli.topSample(m.ctx)
	return sampleMsg{s, err}
}

func (m topModel) Init() tea.Cmd { return m.fetch }

func (m topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch k := msg.String(); k {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		default:
			for _, s := range topSortKeys {
				if s.key == k {
					m.sortBy = s.name
				}
			}
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case sampleMsg:
		m.err = msg.err
		if msg.err == nil {
			m.prev, m.cur, m.read = m.cur, msg.s, true
		}
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.fetch
	}
	return m, nil
}

func (m topModel) View() string {
	help := "c cpu  m mem  t tasks  a app  q quit"
	if m.err != nil {
		help = "cannot read the daemon: " + control.Visible(errorLine(m.err)) + "\n" + help
	}
	if !m.read {
		return "octosup top: reading the daemon…\n" + help + "\n"
	}
	return renderTop(topRows(m.prev, m.cur), m.sortBy, m.width, help)
}

// errorLine is what the live view says of a failed read.
func errorLine(err error) string {
	if control.IsDaemonNotRunning(err) {
		return "octosupd is not running"
	}
	return err.Error()
}

// unwrapWriter is the writer below run's count of what was printed:
// the terminal, for what asks it its size.
func unwrapWriter(w io.Writer) io.Writer {
	if cw, ok := w.(*countingWriter); ok {
		return cw.w
	}
	return w
}
