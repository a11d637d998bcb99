// Command octosup-jail is octosupd's jail helper: octosupd forks it for
// an app it does not spawn in-process (`--jail-spawn helper`, or where the
// in-process spawn cannot run), with the app's prepared jail on an
// inherited descriptor; it runs the jail's setup sequence on itself and
// execs the app (package octosup/jail/spawn). The sequence runs from a C
// constructor, before the Go runtime starts; make builds the binary
// statically, so that a start costs an exec and nothing of a dynamic
// loader's. It is not run by hand.
//
// octosupd looks for it next to its own executable (make install puts
// both in ~/.local/bin) unless `octosupd run --jail-helper PATH` says
// where it is.
package main

import (
	"fmt"
	"os"

	"octosup/jail/spawn"
)

func main() {
	if !spawn.IsHelper(os.Args) {
		fmt.Fprintln(os.Stderr, "octosup-jail is octosupd's jail helper: octosupd runs it between fork and exec of each app; it is not run by hand")
		os.Exit(2)
	}
	// Reached only where the constructor did not run.
	os.Exit(spawn.RunHelper())
}
