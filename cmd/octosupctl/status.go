package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"octosup/control"
)

func (c *cli) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "status [APP]",
		Short:             "Show the apps: state, pid, uptime, restarts, last exit, jail",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			var sa control.StatusArgs
			if len(args) == 1 {
				sa.App = args[0]
			}
			var data control.StatusData
			if err := c.client().Do(cmd.Context(), control.OpStatus, sa, &data); err != nil {
				return opError("status", err)
			}
			if c.json {
				return c.printJSON(data)
			}
			printStatus(c, data, time.Now())
			return nil
		},
	}
}

func printStatus(c *cli, data control.StatusData, now time.Time) {
	// The state store's health after the apps: what the daemon did with
	// a damaged state file, what it could not write.
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
	t := c.table("APP", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "JAIL")
	for _, a := range data.Apps {
		pid, uptime := "-", "-"
		if a.Pid != 0 {
			pid = fmt.Sprint(a.Pid)
		}
		if a.State == "running" && !a.Since.IsZero() {
			uptime = duration(now.Sub(a.Since))
		}
		state := a.State
		if a.State == "failed" && a.Reason != "" {
			state += ": " + a.Reason
		}
		last := "-"
		if a.LastExit != nil {
			last = a.LastExit.String()
			if !a.LastExit.At.IsZero() {
				last += ", " + duration(now.Sub(a.LastExit.At)) + " ago"
			}
		}
		t.row(a.ID, state, pid, uptime, fmt.Sprint(a.Restarts), last, jailSummary(a.Jail))
	}
	t.flush()
}

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
