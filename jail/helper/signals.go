package helper

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelSigaction is the kernel's struct sigaction on amd64 and arm64
// (both define SA_RESTORER): not glibc's, not x/sys's (which has none).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1 // SIG_IGN

// SignalIgnored reports whether the kernel has sig ignored for this
// process. Where it cannot tell (the struct above is not known to match
// this arch, or the query fails) it says true: a caller resets the
// signal to its default, and one reset too many is harmless.
func SignalIgnored(sig int) bool {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return true
	}
	var old kernelSigaction
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return e != 0 || old.handler == sigIgn
}
