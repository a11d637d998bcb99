package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/internal/cgroupfs"
	"octosup/internal/suggest"
	"octosup/internal/version"
	"octosup/policy"
)

// startHint is what a person is told to do when no daemon answers.
const startHint = "start it with `systemctl --user start octosupd` (or `make run` in a checkout)"

// cli is one invocation's state: flags and where output goes.
type cli struct {
	stdout, stderr io.Writer
	socket         string
	json           bool
	// width is how wide a table may be (its last column is cut to it), 0
	// for no limit.
	width int
}

func (c *cli) client() *control.Client { return &control.Client{Path: c.socket} }

// exitError carries an exit code with the one-line error to print.
type exitError struct {
	code int
	err  error
	// detail lines printed below the error (a manifest's problems).
	detail []string
}

// jsonFailure is what --json prints on stdout for a command that failed
// without printing anything there.
type jsonFailure struct {
	OK    bool             `json:"ok"`
	Error jsonFailureError `json:"error"`
}

type jsonFailureError struct {
	ExitCode int      `json:"exit_code"`
	Message  string   `json:"message"`
	Detail   []string `json:"detail"`
}

// countingWriter counts what went through it.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes octosupctl with args (without the program name) and
// returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &countingWriter{w: stdout}
	c := &cli{stdout: out, stderr: stderr, width: terminalWidth(os.Getenv, stdout)}
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(stderr)
	strictCompletion(root)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// cobra's own: unknown command, bad flag, wrong argument count.
		ee = &exitError{code: exitUsage, err: usageError(err)}
	}
	if c.json && out.n == 0 {
		// Scripts read stdout: a failure that printed nothing there
		// (a command that printed its answer, validate's or a call's
		// last step, said it already) goes there too, as one JSON line,
		// and the exit code stays what it says.
		detail := ee.detail
		if detail == nil {
			detail = []string{}
		}
		if b, err := json.Marshal(jsonFailure{OK: false, Error: jsonFailureError{ExitCode: ee.code, Message: ee.err.Error(), Detail: detail}}); err == nil {
			fmt.Fprintf(out, "%s\n", b)
		}
	}
	// The error may carry an app's text (a failure reason, a tool's
	// error), a detail line the manifest's: one line each, visibly.
	fmt.Fprintf(stderr, "octosupctl: %s\n", control.Visible(ee.err.Error()))
	for _, d := range ee.detail {
		fmt.Fprintf(stderr, "  %s\n", control.Visible(d))
	}
	return ee.code
}

// usageError is one of cobra's errors on one line, with what to do:
// cobra's "Did you mean this?" list becomes "did you mean X?".
func usageError(err error) error {
	msg, suggestions, found := strings.Cut(err.Error(), "\n\nDid you mean this?\n")
	if !found {
		return fmt.Errorf("%s (see octosupctl --help)", strings.TrimSpace(msg))
	}
	names := strings.Fields(suggestions)
	return fmt.Errorf("%s; did you mean %s?", msg, strings.Join(names, " or "))
}

// What octosupctl prints for a person goes through say or a table: the
// text a daemon relays is often an app's, which is hostile by assumption,
// or the manifest's, and control.Visible renders every control, bidi and
// invisible character of it as an escape. --json output is not rendered:
// its escaping is already unambiguous, and scripts get the exact text.

// say prints one line for a person.
func (c *cli) say(format string, args ...any) {
	fmt.Fprintln(c.stdout, control.Visible(fmt.Sprintf(format, args...)))
}

// table is a text/tabwriter table for a person: each cell is rendered on
// its own, so that a tab in one (shown as \t) cannot start another.
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func (c *cli) table(header ...string) *table {
	t := &table{out: c.stdout}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) { t.rowShown(shown(cells...)...) }

// rowShown adds a row of cells already rendered with control.Visible.
func (t *table) rowShown(cells ...string) {
	for i, cell := range cells {
		if i > 0 {
			t.tw.Write([]byte{'\t'})
		}
		io.WriteString(t.tw, cell)
	}
	t.tw.Write([]byte{'\n'})
}

// flush writes the table, without the padding an empty last cell leaves.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	lines := bytes.SplitAfter(t.buf.Bytes(), []byte{'\n'})
	for i, l := range lines {
		if trimmed := bytes.TrimRight(l, " \n"); len(trimmed) < len(l) {
			lines[i] = append(trimmed, '\n')
		}
	}
	_, err := t.out.Write(bytes.Join(lines, nil))
	return err
}

// opError turns an error of a daemon call into the exit error a person
// reads: what was asked, why it did not happen, what to do.
func opError(what string, err error) error {
	if err == nil {
		return nil
	}
	var nre *control.NotRunningError
	if errors.As(err, &nre) {
		// The socket it tried: a wrong --socket or XDG_RUNTIME_DIR shows.
		return &exitError{code: exitNotRunning, err: fmt.Errorf("octosupd is not running: nothing listens at %s; %s", nre.Path, startHint)}
	}
	var cerr *control.Error
	if errors.As(err, &cerr) {
		if cerr.Code == control.CodeInvalidManifest {
			var probs control.ManifestProblems
			_ = json.Unmarshal(cerr.Data, &probs)
			return &exitError{
				code:   exitInvalid,
				err:    fmt.Errorf("%s refused: the manifest has %d problem(s); the running apps are unchanged", what, len(probs.Problems)),
				detail: probs.Problems,
			}
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: %s", what, cerr.Message)}
	}
	if errors.Is(err, context.Canceled) {
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: interrupted", what)}
	}
	if errors.Is(err, control.ErrClosed) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: octosupd closed the connection before it answered (it may have stopped or restarted): check `systemctl --user status octosupd`, then try again", what)}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%s: %w", what, err)}
}

// unknownApp adds to a daemon's unknown_app refusal of app the nearest
// name the daemon has, if one is near: "restart clok" → "did you mean
// clock?".
func (c *cli) unknownApp(ctx context.Context, app string, err error) error {
	var cerr *control.Error
	if !errors.As(err, &cerr) || cerr.Code != control.CodeUnknownApp {
		return err
	}
	var data control.StatusData
	if c.client().Do(ctx, control.OpStatus, control.StatusArgs{}, &data) != nil {
		return err
	}
	ids := make([]string, 0, len(data.Apps))
	for _, a := range data.Apps {
		ids = append(ids, a.ID)
	}
	if near := suggest.Nearest(app, ids); near != "" {
		return &control.Error{Code: cerr.Code, Message: fmt.Sprintf("%s; did you mean %s?", cerr.Message, near), Data: cerr.Data}
	}
	return err
}

func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "octosupctl",
		Short:   "Control octosupd, the native apps' supervisor",
		Version: version.String(),
		Long: `Control octosupd, the native apps' supervisor.

Exit codes: 0 done; 1 the daemon refused or failed the operation;
2 usage; 3 octosupd is not running; 4 the manifest is invalid.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&c.socket, "socket", "", "the control socket (default $XDG_RUNTIME_DIR/octosup/control.sock)")
	root.PersistentFlags().BoolVar(&c.json, "json", false, "print JSON for scripts")
	root.AddCommand(
		c.statusCommand(),
		c.lifecycleCommand(control.OpStart, "Start an app"),
		c.lifecycleCommand(control.OpStop, "Stop an app (SIGTERM, then SIGKILL after a grace period)"),
		c.lifecycleCommand(control.OpRestart, "Restart an app"),
		c.logsCommand(),
		c.watchCommand(),
		c.reloadCommand(),
		c.validateCommand(),
		c.jailCommand(),
		c.topCommand(),
		c.approvalsCommand(),
		c.approveCommand(),
		c.consentCommand(),
		c.callCommand(),
		c.rulesCommand(),
		c.auditCommand(),
	)
	return root
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) lifecycleCommand(op, short string) *cobra.Command {
	return &cobra.Command{
		Use:               op + " APP",
		Short:             short,
		Args:              oneArg,
		ValidArgsFunction: c.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			var data control.StateData
			if err := c.client().Do(cmd.Context(), op, control.AppArgs{App: args[0]}, &data); err != nil {
				return opError(op+" "+args[0], c.unknownApp(cmd.Context(), args[0], err))
			}
			if c.json {
				return c.printJSON(data)
			}
			line := fmt.Sprintf("%s: %s", args[0], data.State)
			if data.App.Pid != 0 {
				line += fmt.Sprintf(" (pid %d)", data.App.Pid)
			}
			if data.State == "stopped" && data.App.LastExit != nil {
				line += fmt.Sprintf(" (%s)", data.App.LastExit)
			}
			c.say("%s", line)
			return nil
		},
	}
}

// completeApps completes app ids from a running daemon, and nothing when
// none runs.
func (c *cli) completeApps(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var data control.StatusData
	if err := c.client().Do(cmd.Context(), control.OpStatus, control.StatusArgs{}, &data); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ids := make([]string, 0, len(data.Apps))
	for _, a := range data.Apps {
		ids = append(ids, a.ID)
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

func (c *cli) reloadCommand() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Re-read the manifest and apply it; a bad one is refused and the running apps stay",
		Long: `Re-read the manifest and apply it. Added apps start (when autostart),
removed ones stop, and each running app whose process would now run
differently (its jail, program, arguments, environment or directory) is
restarted; what was restarted, and why, is printed. Changed grants apply
to the running apps at once, without a restart. A manifest with any
problem is refused whole and the running apps stay as they are.

With --keep-running the changed apps keep running their old entry, and
status marks them "stale: restart to apply" until they are restarted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var data control.ReloadData
			if err := c.client().Do(cmd.Context(), control.OpReload, control.ReloadArgs{KeepRunning: keep}, &data); err != nil {
				return opError("reload", err)
			}
			if c.json {
				return c.printJSON(data)
			}
			c.say("reloaded: %d apps", data.Apps)
			for _, id := range data.Added {
				c.say("added: %s", id)
			}
			for _, id := range data.Removed {
				c.say("removed: %s", id)
			}
			for _, ch := range data.Restarted {
				line := fmt.Sprintf("restarted: %s (%s changed)", ch.App, conjoin(ch.Changed))
				if ch.State == "failed" {
					line += ": failed: " + ch.Reason
				}
				c.say("%s", line)
			}
			for _, ch := range data.Stale {
				c.say("stale: %s (%s changed): restart to apply", ch.App, conjoin(ch.Changed))
			}
			for _, id := range data.Limits {
				c.say("limits applied in place: %s", id)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-running", false, "leave the running apps whose entry changed running their old entry (status marks them stale)")
	return cmd
}

// conjoin lists words for a person: "jail", "exec and argv", "jail, exec
// and argv".
func conjoin(words []string) string {
	switch n := len(words); n {
	case 0:
		return "entry"
	case 1:
		return words[0]
	default:
		return strings.Join(words[:n-1], ", ") + " and " + words[n-1]
	}
}

func (c *cli) validateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a manifest without a daemon: every problem, one per line; warn of programs not installed",
		Args:  oneArg,
		RunE: func(_ *cobra.Command, args []string) error {
			m, err := policy.Load(args[0])
			if err == nil {
				// Against this user's directories, as the daemon checks it.
				if dirs, derr := policy.DirsFromEnv(os.Getenv); derr == nil {
					err = m.CheckPlaces(dirs)
				}
			}
			var verr *policy.ValidationError
			switch {
			case errors.As(err, &verr):
				probs := make([]string, 0, len(verr.Problems))
				for _, p := range verr.Problems {
					probs = append(probs, p.String())
				}
				if c.json {
					c.printJSON(map[string]any{"valid": false, "problems": probs})
					return &exitError{code: exitInvalid, err: fmt.Errorf("%s is invalid: %d problem(s)", args[0], len(probs))}
				}
				return &exitError{code: exitInvalid, err: fmt.Errorf("%s is invalid: %d problem(s)", args[0], len(probs)), detail: probs}
			case errors.Is(err, os.ErrNotExist):
				return &exitError{code: exitFailed, err: fmt.Errorf("validate: no file %s", args[0])}
			case err != nil:
				return &exitError{code: exitFailed, err: fmt.Errorf("validate %s: %w", args[0], err)}
			}
			// A program not (yet) installed leaves the manifest valid: the
			// daemon reports that app failed, the others run.
			warns := make([]string, 0)
			for _, p := range m.CheckPrograms() {
				warns = append(warns, p.String())
			}
			if dirs, derr := policy.DirsFromEnv(os.Getenv); derr == nil {
				for _, p := range m.CheckWritablePrograms(dirs) {
					warns = append(warns, p.String())
				}
			}
			// What the host's cgroup v2 cannot hold, whoever runs the
			// daemon (a root one, as this user is root).
			have, where := cgroupfs.HostControllers()
			for _, p := range m.CheckLimitsHost(have, where, os.Geteuid() == 0) {
				warns = append(warns, p.String())
			}
			if c.json {
				return c.printJSON(map[string]any{"valid": true, "apps": len(m.Apps), "warnings": warns})
			}
			c.say("%s is valid: %d apps", args[0], len(m.Apps))
			for _, w := range warns {
				fmt.Fprintf(c.stderr, "octosupctl: warning: %s\n", control.Visible(w))
			}
			return nil
		},
	}
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// oneArg is cobra.ExactArgs(1) with a message that names the command and
// what it wants: "stop: name one APP (octosupctl stop APP)".
func oneArg(cmd *cobra.Command, args []string) error {
	if len(args) == 1 {
		return nil
	}
	what := "APP"
	if f := strings.Fields(cmd.Use); len(f) > 1 {
		what = f[1]
	}
	got := "none"
	if len(args) > 1 {
		got = fmt.Sprintf("%d: %s", len(args), strings.Join(args, " "))
	}
	return fmt.Errorf("%s: name one %s (octosupctl %s %s); got %s", cmd.Name(), what, strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), what, got)
}

// strictCompletion makes cobra's completion command refuse a shell it
// does not know: it printed its help, exit 0, for completion tcsh. It
// must run after SetOut: cobra's scripts are written where the root's
// output was when the command was made.
func strictCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() != "completion" {
			continue
		}
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{code: exitUsage, err: errors.New("completion: name a shell: bash, zsh, fish or powershell")}
			}
			return &exitError{code: exitUsage, err: fmt.Errorf("completion: no completion for %q: bash, zsh, fish or powershell", args[0])}
		}
	}
}
