//go:build !cgo

package spawn

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// RunHelper, in a binary built without cgo, has no setup sequence to run
// (it is C): it says so on the status pipe, which the daemon reports as
// the app's failed start, and runs nothing. `go build ./...` with
// CGO_ENABLED=0 still builds cmd/octosup-jail, and a daemon that starts
// apps in-process never runs it; one that runs it gets the reason, not an
// app with no jail.
func RunHelper() int {
	rec := binary.NativeEndian.AppendUint32(nil, stepNoCgo)
	rec = binary.NativeEndian.AppendUint32(rec, 0)
	_, _ = unix.Write(StatusFD, rec)
	return Exit
}
