// Command octosupd is the octosup daemon: it runs the native apps of the
// manifest in their jails and serves the control socket. systemd runs it
// as `octosupd run` (systemd/octosupd.service).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"go.uber.org/zap"

	"octosup/daemon"
	"octosup/internal/version"
	"octosup/jail"
	"octosup/policy"
)

func main() {
	// Apps start in-process (jail/fork.go), or through the jail helper
	// octosup-jail with --jail-spawn helper and where the in-process
	// spawn cannot run. octosupd still answers the helper's mode, so that
	// --jail-helper may name octosupd itself. It must run before anything
	// else.
	if jail.IsHelper(os.Args) {
		os.Exit(jail.RunHelper())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

// Exit codes of octosupd.
const (
	exitOK       = 0
	exitFailed   = 1 // the daemon could not start or failed
	exitUsage    = 2
	exitManifest = 4 // the manifest does not validate
)

func run(ctx context.Context, args []string, stderr *os.File) int {
	code := exitOK
	root := &cobra.Command{
		Use:           "octosupd",
		Short:         "octosup's supervisor daemon",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		// Without a command there is nothing to do: usage, exit 2.
		RunE: func(cmd *cobra.Command, _ []string) error {
			code = exitUsage
			return fmt.Errorf("no command given: run `octosupd run` (what systemd runs), or see octosupd --help")
		},
	}
	var configPath, logLevel, jailHelper, jailSpawn string
	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon in the foreground (what systemd runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := daemon.NewLogger(stderr, logLevel)
			if err != nil {
				code = exitUsage
				return err
			}
			defer log.Sync()
			if jailSpawn != "fork" && jailSpawn != "helper" {
				code = exitUsage
				return fmt.Errorf("--jail-spawn %q: want fork or helper", jailSpawn)
			}
			helper, err := jail.FindHelper(jailHelper)
			if err != nil {
				// Apps spawned in-process never need it: only an explicit
				// --jail-helper or --jail-spawn helper, or a machine
				// without the in-process spawn, makes it a failure. The
				// rare fallback to the helper (a kernel refusing clone3's
				// flags) then runs octosupd itself as the helper: slower,
				// the same jail.
				if jailHelper != "" || jailSpawn == "helper" || !jail.SpawnsInProcess() {
					code = exitFailed
					return err
				}
				log.Warn("no jail helper: apps are spawned in-process; where that fails, octosupd itself stands in for the helper", zap.Error(err))
				helper = ""
			}
			jcfg := jail.Config{HelperPath: helper, UseHelper: jailSpawn == "helper"}
			err = daemon.Run(cmd.Context(), daemon.Config{ManifestPath: configPath, Log: log, Jail: jcfg})
			if err != nil {
				code = exitFailed
				var verr *policy.ValidationError
				if errors.As(err, &verr) {
					code = exitManifest
				}
			}
			return err
		},
	}
	runCmd.Flags().StringVar(&configPath, "config", "", "the manifest (default $XDG_CONFIG_HOME/octosup/native-apps.json)")
	runCmd.Flags().StringVar(&logLevel, "log-level", "info", "debug (every control op too), info (the apps' output too: a line each on a terminal), warn or error (problems only)")
	runCmd.Flags().StringVar(&jailHelper, "jail-helper", "", "the jail helper apps start through with --jail-spawn helper, or where the in-process spawn cannot run (default: octosup-jail next to octosupd)")
	runCmd.Flags().StringVar(&jailSpawn, "jail-spawn", "fork", "fork: jail each app in a child forked in-process (where the kernel allows); helper: start every app through the jail helper")
	root.AddCommand(runCmd)
	root.SetArgs(args)
	root.SetOut(stderr)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		printError(stderr, err)
		if code == exitOK {
			code = exitUsage // cobra's own errors: flags, unknown commands
		}
		return code
	}
	return code
}

// printError prints err on one line, and a refused manifest's problems
// one per line below it.
func printError(w io.Writer, err error) {
	var verr *policy.ValidationError
	var merr *daemon.ManifestError
	if errors.As(err, &verr) && errors.As(err, &merr) {
		fmt.Fprintf(w, "octosupd: the manifest %s has %d problem(s); fix them and start again:\n", merr.Path, len(verr.Problems))
		for _, p := range verr.Problems {
			fmt.Fprintf(w, "  %s\n", p.String())
		}
		return
	}
	if errors.As(err, &merr) && errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(w, "octosupd: %v, or pass --config FILE\n", err)
		return
	}
	fmt.Fprintf(w, "octosupd: %v\n", err)
}
