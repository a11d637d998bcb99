// Command octosup-jail is octosupd's jail helper: octosupd forks it for
// every app it starts, with the app's jail spec and seccomp filter on an
// inherited descriptor; it applies the jail to itself and execs the app
// (package octosup/jail/helper). It is built without cgo and statically,
// so that it starts in about a millisecond: it is not run by hand.
//
// octosupd looks for it next to its own executable (make install puts
// both in ~/.local/bin) unless `octosupd run --jail-helper PATH` says
// where it is.
package main

import (
	"fmt"
	"os"

	"octosup/jail/helper"
)

func main() {
	if !helper.IsHelper(os.Args) {
		fmt.Fprintln(os.Stderr, "octosup-jail is octosupd's jail helper: octosupd runs it between fork and exec of each app; it is not run by hand")
		os.Exit(2)
	}
	os.Exit(helper.Run())
}
