package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"octosup/control"
)

func (c *cli) approvalsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "approvals",
		Short: "List the questions waiting for a person: first-use consent and tool confirmations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var data control.ApprovalsData
			if err := c.client().Do(cmd.Context(), control.OpApprovals, struct{}{}, &data); err != nil {
				return opError("approvals", err)
			}
			if c.json {
				return c.printJSON(data)
			}
			if len(data.Approvals) == 0 {
				c.say("no pending approvals")
				return nil
			}
			now := time.Now()
			t := c.table("ID", "APP", "KIND", "ASKS", "EXPIRES IN")
			for _, a := range data.Approvals {
				t.row(a.ApprovalID, a.App, a.Kind, approvalAsks(a), duration(a.Expires.Sub(now)))
			}
			t.flush()
			c.say("answer with: octosupctl approve ID allow|deny [--remember]")
			return nil
		},
	}
}

// approvalAsks says in a few words what an approval asks the person.
func approvalAsks(a control.Approval) string {
	switch a.Kind {
	case "consent":
		if a.Method != "" {
			return "use the agent service (first request: " + a.Method + ")"
		}
		return "use the agent service"
	case "tool":
		s := "run " + a.Tool
		if a.Risk != "" {
			s += " (" + a.Risk + ")"
		}
		if a.Args != "" {
			s += " " + a.Args
		}
		return s
	}
	return a.Kind
}

func (c *cli) approveCommand() *cobra.Command {
	var remember bool
	cmd := &cobra.Command{
		Use:   "approve ID allow|deny",
		Short: "Answer a pending approval; --remember makes a tool decision a standing rule",
		Long: `Answer a pending approval (see octosupctl approvals).

A consent decision is always kept: the app is not asked again until
octosupctl consent revoke APP (so --remember is refused there, as saying
nothing). For a tool confirmation, --remember keeps
the decision as a standing rule for that app and tool (octosupctl rules).`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: c.completeApprove,
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "approve " + args[0]
			if args[1] != "allow" && args[1] != "deny" {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: the decision is %q: say allow or deny", what, args[1])}
			}
			var data control.ApproveData
			req := control.ApproveArgs{ApprovalID: args[0], Decision: args[1], Remember: remember}
			if err := c.client().Do(cmd.Context(), control.OpApprove, req, &data); err != nil {
				var cerr *control.Error
				if errors.As(err, &cerr) && (cerr.Code == control.CodeUnknownApproval || cerr.Code == control.CodeBadRequest && args[0] == "") {
					return &exitError{code: exitFailed, err: fmt.Errorf("%s: %s (octosupctl approvals lists the pending ones)", what, cerr.Message)}
				}
				return opError(what, err)
			}
			if c.json {
				return c.printJSON(data)
			}
			c.say("%s: %s", args[0], data.Decision)
			return nil
		},
	}
	cmd.Flags().BoolVar(&remember, "remember", false, "keep a tool decision as a standing rule")
	return cmd
}

// completeApprove completes approve's ID with the pending approvals of a
// running daemon (each described by its app and what it asks), then the
// decision.
func (c *cli) completeApprove(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		var data control.ApprovalsData
		if err := c.client().Do(cmd.Context(), control.OpApprovals, struct{}{}, &data); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ids := make([]string, 0, len(data.Approvals))
		for _, a := range data.Approvals {
			// The daemon makes the ids; one a shell could not take
			// literally is left out rather than offered mangled. The
			// description is an app's text: rendered, it holds no tab
			// or newline to break the completion's lines.
			if a.ApprovalID == "" || control.Visible(a.ApprovalID) != a.ApprovalID || strings.ContainsAny(a.ApprovalID, " \t'\"$`") {
				continue
			}
			ids = append(ids, a.ApprovalID+"\t"+control.Visible(a.App+": "+approvalAsks(a)))
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	case 1:
		return []string{"allow", "deny"}, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func (c *cli) consentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consent",
		Short: "List or revoke the kept first-use consent decisions",
	}
	list := &cobra.Command{
		Use:   "list [APP]",
		Short: "List the kept decisions",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := control.ConsentArgs{Action: "list"}
			if len(args) == 1 {
				req.App = args[0]
			}
			var data control.ConsentData
			if err := c.client().Do(cmd.Context(), control.OpConsent, req, &data); err != nil {
				return opError("consent list", err)
			}
			if c.json {
				return c.printJSON(data)
			}
			if len(data.Consents) == 0 {
				c.say("no consent decisions kept")
				return nil
			}
			t := c.table("APP", "DECISION", "SINCE")
			for _, d := range data.Consents {
				t.row(d.App, d.Decision, d.At.Local().Format(time.DateTime))
			}
			return t.flush()
		},
	}
	revoke := &cobra.Command{
		Use:               "revoke APP",
		Short:             "Forget an app's decision: its next request asks again",
		Args:              oneArg,
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			var data control.ConsentData
			if err := c.client().Do(cmd.Context(), control.OpConsent, control.ConsentArgs{Action: "revoke", App: args[0]}, &data); err != nil {
				return opError("consent revoke "+args[0], err)
			}
			if c.json {
				return c.printJSON(data)
			}
			if data.Revoked != nil && *data.Revoked {
				c.say("%s: consent revoked; its next request asks again", args[0])
			} else {
				c.say("%s: no decision was kept", args[0])
			}
			return nil
		},
	}
	cmd.AddCommand(list, revoke)
	return cmd
}

// approvalLine is an approval event for a person.
func approvalLine(a control.Approval) string {
	at := a.Created
	if a.State != "pending" {
		at = time.Now()
	}
	s := fmt.Sprintf("%s %s approval %s %s: %s", at.Local().Format("15:04:05"), a.App, a.ApprovalID, a.State, approvalAsks(a))
	if a.State == "pending" {
		s += fmt.Sprintf(" (octosupctl approve %s allow|deny)", a.ApprovalID)
	}
	return s
}
