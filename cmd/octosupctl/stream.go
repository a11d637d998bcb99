package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"octosup/control"
)

func (c *cli) logsCommand() *cobra.Command {
	var lines int
	var follow bool
	cmd := &cobra.Command{
		Use:               "logs APP",
		Short:             "Print an app's last output lines; -f follows",
		Args:              oneArg,
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "logs " + args[0]
			la := control.LogsArgs{App: args[0], Lines: lines, Follow: follow}
			var data control.LogsData
			if !follow {
				if err := c.client().Do(cmd.Context(), control.OpLogs, la, &data); err != nil {
					return opError(what, err)
				}
				for _, l := range data.Lines {
					c.printLog(l)
				}
				return nil
			}
			conn, err := c.client().Stream(cmd.Context(), control.OpLogs, la, &data)
			if err != nil {
				return opError(what, err)
			}
			defer conn.Close()
			for _, l := range data.Lines {
				c.printLog(l)
			}
			return c.follow(cmd.Context(), conn, what, func(ev control.Event) {
				if ev.Name != control.TopicLog {
					return
				}
				var l control.LogLine
				if ev.Decode(&l) == nil {
					c.printLog(l)
				}
			})
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "how many of the last lines")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print new lines as the app writes them")
	return cmd
}

func (c *cli) printLog(l control.LogLine) {
	if c.json {
		c.printJSONLine(l)
		return
	}
	// One record, one line: a newline or CR in the text is shown, and
	// cannot start a line that reads as another app's.
	if l.Stream == "stderr" {
		c.say("%s [stderr] %s", l.At.Local().Format("15:04:05.000"), l.Text)
		return
	}
	c.say("%s %s", l.At.Local().Format("15:04:05.000"), l.Text)
}

func (c *cli) printJSONLine(v any) {
	b, err := jsonLine(v)
	if err == nil {
		c.stdout.Write(b)
	}
}

func (c *cli) watchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch",
		Short: "Print each app's state and the pending approvals, then every change as it happens, one line each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := c.client().Subscribe(cmd.Context(), control.TopicState, control.TopicApproval)
			if err != nil {
				return opError("watch", err)
			}
			defer conn.Close()
			// Where every app is now, then what changes: subscribed
			// first, so that nothing falls between the two.
			var now control.StatusData
			if err := conn.Do(cmd.Context(), control.OpStatus, control.StatusArgs{}, &now); err != nil {
				return opError("watch", err)
			}
			seen := map[string]string{}
			for _, a := range now.Apps {
				c.printState(seen, control.StateEvent{App: a.ID, State: a.State, Pid: a.Pid, Restarts: a.Restarts, Since: a.Since, LastExit: a.LastExit, Reason: a.Reason})
			}
			var pending control.ApprovalsData
			if err := conn.Do(cmd.Context(), control.OpApprovals, struct{}{}, &pending); err != nil {
				return opError("watch", err)
			}
			for _, a := range pending.Approvals {
				c.printApproval(a)
			}
			return c.follow(cmd.Context(), conn, "watch", func(ev control.Event) {
				switch ev.Name {
				case control.TopicState:
					var st control.StateEvent
					if ev.Decode(&st) == nil {
						c.printState(seen, st)
					}
				case control.TopicApproval:
					var a control.Approval
					if ev.Decode(&a) == nil {
						c.printApproval(a)
					}
				}
			})
		},
	}
}

func (c *cli) printApproval(a control.Approval) {
	if c.json {
		if b, err := control.EncodeEvent(control.TopicApproval, a); err == nil {
			c.stdout.Write(append(b, '\n'))
		}
		return
	}
	c.say("%s", approvalLine(a))
}

// printState prints a state event; seen holds what was printed last of
// each app. A person gets a line a change: an event that repeats an app's
// state and reason is left out (the daemon reports a starting app's pid
// once it has one, and an event may repeat what watch's first status
// said). --json prints every event as it came.
func (c *cli) printState(seen map[string]string, st control.StateEvent) {
	if c.json {
		if b, err := control.EncodeEvent(control.TopicState, st); err == nil {
			c.stdout.Write(append(b, '\n'))
		}
		return
	}
	key := st.State + "\x00" + st.Reason
	if prev, ok := seen[st.App]; ok && prev == key {
		return
	}
	seen[st.App] = key
	c.say("%s", stateLine(st))
}

// stateLine is one state event for a person: "12:00:01 notes stopped (signal SIGKILL)".
func stateLine(st control.StateEvent) string {
	if st.Warning != "" {
		// Not a move: the app ran into a limit, now, in the state it
		// has been in since st.Since.
		return fmt.Sprintf("%s %s warning: %s", time.Now().Format("15:04:05"), st.App, st.Warning)
	}
	s := fmt.Sprintf("%s %s %s", st.Since.Local().Format("15:04:05"), st.App, st.State)
	switch {
	case st.State == "running" && st.Pid != 0:
		s += fmt.Sprintf(" (pid %d)", st.Pid)
	case st.State == "failed" && st.Reason != "":
		s += ": " + st.Reason
	case st.State == "stopped" && st.LastExit != nil:
		s += fmt.Sprintf(" (%s)", st.LastExit)
	}
	return s
}

// follow prints a stream's events until the person interrupts (exit 0)
// or the daemon goes away (exit 1).
func (c *cli) follow(ctx context.Context, conn *control.Conn, what string, print func(control.Event)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-conn.Events():
			if !ok {
				err := conn.Err()
				if errors.Is(err, control.ErrClosed) {
					return &exitError{code: exitFailed, err: fmt.Errorf("%s: octosupd closed the connection (it stopped, or this client fell behind)", what)}
				}
				return opError(what, err)
			}
			print(ev)
		}
	}
}
