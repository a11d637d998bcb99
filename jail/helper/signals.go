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

// resetIgnoredSignals gives back their default to the signals this
// process ignores: execve keeps an ignored signal ignored, and the
// helper's Go runtime leaves alone the ones it does not handle (signal
// 32, an inherited SIGHUP or SIGINT), so an app would otherwise start
// with whatever the daemon's own parent ignored. The in-process spawn
// does the same in its child.
func resetIgnoredSignals() error {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil // the struct above is not known to match
	}
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			if e == unix.EINVAL {
				continue
			}
			return e
		}
		if old.handler != sigIgn {
			continue
		}
		var dfl kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); e != 0 {
			return e
		}
	}
	return nil
}
