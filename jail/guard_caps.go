package jail

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// withoutCaps runs f on its goroutine's thread with no effective
// capability: a root daemon's file system checks are then an app's
// (root too, with none), where the guard acts on a path for the app.
// Capabilities are a thread's own; the thread is locked for f, and one
// whose capabilities could not be put back is left to end with the
// goroutine, never handed to other code.
func withoutCaps(f func() error) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	if caps[0].Effective == 0 && caps[1].Effective == 0 {
		defer runtime.UnlockOSThread()
		return f()
	}
	none := caps
	none[0].Effective, none[1].Effective = 0, 0
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := f()
	if unix.Capset(&hdr, &caps[0]) == nil {
		runtime.UnlockOSThread()
	}
	return err
}
