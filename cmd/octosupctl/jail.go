package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"octosup/control"
)

func (c *cli) jailCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "jail APP",
		Short: "Show the jail an app gets: what it may reach, its syscall rules, its environment",
		Long: `Show the jail an app gets if it starts now, compiled by the daemon from
the app's manifest entry with the daemon's own settings (strictness,
OCTOSUP_SANDBOX_NARROW, developer mode). --json prints the spec itself.
What took at the last start is in "octosupctl status".`,
		Args:              oneArg,
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			var data control.JailData
			if err := c.client().Do(cmd.Context(), control.OpJail, control.AppArgs{App: args[0]}, &data); err != nil {
				return opError("jail "+args[0], err)
			}
			if c.json {
				return c.printJSON(data.Spec)
			}
			// Printed as it is: jail.Describe renders the manifest's
			// values with control.Visible, and rendering its lines again
			// here would double the backslashes of those escapes.
			fmt.Fprint(c.stdout, data.Text)
			var st control.StatusData
			if err := c.client().Do(cmd.Context(), control.OpStatus, control.StatusArgs{App: args[0]}, &st); err != nil {
				return opError("jail "+args[0], err)
			}
			if len(st.Apps) == 1 {
				for _, line := range limitsLines(st.Apps[0].Limits) {
					c.say("%s", line)
				}
			}
			return nil
		},
	}
}

// baseLayers are the layers every jailed app has: an app whose jail
// lacks one does not start, so status names them only when one is not
// there.
var baseLayers = []string{"env", "fds", "no_new_privs", "caps"}

// jailSummary is the jail of a running app in a few words: Landlock with
// its ABI and seccomp when they took, and what the kernel lacked, e.g.
// "landlock 7, seccomp" or "seccomp (missing landlock)".
func jailSummary(j *control.JailReport) string {
	if j == nil {
		return "-"
	}
	var parts []string
	base := true
	for _, l := range baseLayers {
		base = base && slices.Contains(j.Layers, l)
	}
	for _, l := range j.Layers {
		switch {
		case base && slices.Contains(baseLayers, l):
		case l == "landlock":
			parts = append(parts, fmt.Sprintf("landlock %d", j.LandlockABI))
		default:
			parts = append(parts, l)
		}
	}
	s := strings.Join(parts, ", ")
	if s == "" {
		s = "base only"
	}
	if len(j.Missing) > 0 {
		s += " (missing " + strings.Join(j.Missing, ", ") + ")"
	}
	return s
}

// limitsLines say which of the app's limits took at its last start, and
// through what (docs/limits.md).
func limitsLines(l *control.LimitsReport) []string {
	if l == nil {
		return []string{"limits: not started yet (the manifest's limits apply at its start)"}
	}
	lines := []string{"limits (at the last start): limiter " + l.Limiter}
	applied := "none"
	if len(l.Applied) > 0 {
		applied = strings.Join(l.Applied, ", ")
	}
	lines = append(lines, "  applied: "+applied)
	if len(l.Missing) > 0 {
		lines = append(lines, "  missing: "+strings.Join(l.Missing, ", ")+" (no controller for them here: docs/limits.md)")
	}
	return lines
}
