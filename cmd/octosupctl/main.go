// Command octosupctl controls octosupd from a terminal or a script.
//
// Exit codes, which scripts may rely on:
//
//	0  done
//	1  the daemon refused or failed the operation (or it could not be done)
//	2  usage: unknown command, bad flag or argument
//	3  octosupd is not running
//	4  the manifest is invalid (validate, reload)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes (see the package doc).
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitNotRunning = 3
	exitInvalid    = 4
)
