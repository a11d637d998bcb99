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
				for _, line := range grantLines(st.Apps[0].Jail) {
					c.say("%s", line)
				}
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
	if g := grantsSummary(j.Grants); g != "" {
		s += "; " + g
	}
	return s
}

// grantsSummary names an app's desktop grants in a few words, saying
// how a compositor sees it: "wayland (no security context), dri (1
// node)".
func grantsSummary(grants []control.Grant) string {
	var parts []string
	nodes := 0
	for _, g := range grants {
		switch {
		case g.Name == "dri" && g.Via == "landlock":
			nodes++
		case g.Name == "dri":
			parts = append(parts, "dri (no render node)")
		case g.Name == "wayland" && g.Via == "guard-connect":
			parts = append(parts, "wayland (no security context)")
		default:
			parts = append(parts, g.Name)
		}
	}
	switch {
	case nodes == 1:
		parts = append(parts, "dri (1 node)")
	case nodes > 1:
		parts = append(parts, fmt.Sprintf("dri (%d nodes)", nodes))
	}
	return strings.Join(parts, ", ")
}

// grantLines say which desktop sockets and devices the app got at its
// last start, and how (docs/jail.md, "Desktop sockets and devices").
func grantLines(j *control.JailReport) []string {
	if j == nil || len(j.Grants) == 0 {
		return nil
	}
	lines := []string{"desktop (at the last start):"}
	for _, g := range j.Grants {
		var how string
		switch g.Via {
		case "guard-connect":
			how = "the daemon made the connection: the server sees the daemon"
			if g.Name == "wayland" {
				how += "; no security context, so every protocol the compositor offers its clients, screen capture and virtual input among them where it has them"
			}
		case "pulse-filter":
			how = "through the daemon's sound filter: playing, recording and the server's lists; no modules, defaults or devices"
		case "landlock":
			how = "render node, read-write with its ioctls"
		case "no-render-node":
			how = "no render node on this machine: the app draws without the GPU"
		default:
			how = g.Via
		}
		path := g.Path
		if path == "" {
			path = "-"
		}
		lines = append(lines, fmt.Sprintf("  %-10s %s (%s)", g.Name, control.Visible(path), how))
	}
	return lines
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
