package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"octosup/control"
)

func (c *cli) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status [APP]",
		Short: "Show the apps: state, pid, uptime, restarts, last exit, jail, and why one failed",
		Long: `Show the apps: state, pid, uptime, restarts, last exit, jail, and why one
failed. A failure's reason is cut to the terminal's width (COLUMNS, when
set, is the width); status APP shows it whole, as does --json.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The table shows no usage: only --json asks the daemon
			// to read the counters (a few files an app).
			sa := control.StatusArgs{Usage: c.json}
			what := "status"
			if len(args) == 1 {
				sa.App = args[0]
				what += " " + args[0]
			}
			var data control.StatusData
			if err := c.client().Do(cmd.Context(), control.OpStatus, sa, &data); err != nil {
				return opError(what, err)
			}
			if c.json {
				return c.printJSON(data)
			}
			width := c.width
			if sa.App != "" {
				width = 0 // one app: its whole reason
			}
			printStatus(c, data, time.Now(), width)
			return nil
		},
	}
}

// minReason is the least of a reason a cut leaves, however narrow the
// terminal: a line wider than the terminal wraps, and the table with it,
// so the floor is low; the note below the table says where the rest is.
const minReason = 8

// printStatus prints the status table. A failure's reason, when an app
// has one, is the last column: with width > 0 it is cut so that each
// line fits in width characters. The state store's health comes after
// the apps: what the daemon did with a damaged state file, what it could
// not write.
func printStatus(c *cli, data control.StatusData, now time.Time, width int) {
	if data.Store != nil {
		defer func() {
			for _, n := range data.Store.Notes {
				c.say("store: %s", n)
			}
		}()
	}
	if len(data.Apps) == 0 {
		c.say("no apps in the manifest")
		return
	}
	header := []string{"APP", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "JAIL"}
	rows := make([][]string, 0, len(data.Apps))
	reasons := make([]string, 0, len(data.Apps))
	anyReason := false
	for _, a := range data.Apps {
		pid, uptime := "-", "-"
		if a.Pid != 0 {
			pid = fmt.Sprint(a.Pid)
		}
		if a.State == "running" && !a.Since.IsZero() {
			uptime = duration(now.Sub(a.Since))
		}
		state := a.State
		if len(a.Stale) > 0 {
			// A reload --keep-running left it running its old entry.
			state += " " + staleMark
		}
		last := "-"
		if a.LastExit != nil {
			last = a.LastExit.String()
			if !a.LastExit.At.IsZero() {
				last += ", " + duration(now.Sub(a.LastExit.At)) + " ago"
			}
		}
		rows = append(rows, shown(a.ID, state, pid, uptime, fmt.Sprint(a.Restarts), last, jailSummary(a.Jail)+limitsMark(a.Limits)))
		reasons = append(reasons, control.Visible(a.Reason))
		anyReason = anyReason || a.Reason != ""
	}
	if !anyReason {
		t := c.table(header...)
		for _, r := range rows {
			t.rowShown(r...)
		}
		t.flush()
		return
	}
	cut := false
	if width > 0 {
		room := max(width-reasonColumn(c, shown(header...), rows), minReason)
		for i, r := range reasons {
			if utf8.RuneCountInString(r) > room {
				reasons[i], cut = cutRunes(r, room), true
			}
		}
	}
	t := c.table(append(header, "REASON")...)
	for i, r := range rows {
		t.rowShown(append(r, reasons[i])...)
	}
	t.flush()
	if cut {
		c.say("(a reason is cut to the terminal's width: octosupctl status APP shows it whole)")
	}
}

// shown renders each cell for a person.
func shown(cells ...string) []string {
	out := make([]string, len(cells))
	for i, s := range cells {
		out[i] = control.Visible(s)
	}
	return out
}

// reasonColumn is where the table's last column starts: the width of the
// other columns as the table lays them out, padding included.
func reasonColumn(c *cli, header []string, rows [][]string) int {
	t := (&cli{}).table()
	for _, r := range append([][]string{header}, rows...) {
		t.rowShown(append(r, "")...)
	}
	t.tw.Flush() // not t.flush: the padding after the last column counts
	first, _, _ := strings.Cut(t.buf.String(), "\n")
	return utf8.RuneCountInString(first)
}

// cutRunes cuts s to n characters, the last an ellipsis. A cut may split
// an escape (\x1b): the text stays text.
func cutRunes(s string, n int) string {
	i, count := 0, 0
	for j := range s {
		if count == n-1 {
			i = j
			break
		}
		count++
	}
	return s[:i] + "…"
}

// terminalWidth is how wide a table may be on f: COLUMNS when it is set
// (as ps reads it), else f's terminal's width, else 0 (no limit: a pipe
// or file gets whole lines).
func terminalWidth(getenv func(string) string, f any) int {
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if file, ok := f.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(file.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 0
}

// staleMark follows the state of an app that runs an entry the manifest
// no longer has.
const staleMark = "(stale: restart to apply)"

// duration is a short human duration: 45s, 3m12s, 5h04m, 2d03h.
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// limitsMark is what the status table adds to the jail column when a
// limit of the entry does not hold the app: "; limits missing: memory".
func limitsMark(l *control.LimitsReport) string {
	if l == nil || len(l.Missing) == 0 {
		return ""
	}
	names := make([]string, 0, len(l.Missing))
	for _, m := range l.Missing {
		names = append(names, strings.TrimPrefix(m, "limits."))
	}
	return "; limits missing: " + strings.Join(names, ", ")
}
