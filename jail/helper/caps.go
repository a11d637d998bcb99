package helper

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DropCaps empties every capability set of the calling thread: bounding
// (when it may: that needs CAP_SETPCAP, which an unprivileged daemon does
// not have and then cannot pass on either), ambient, inheritable,
// permitted and effective. With no_new_privs already set, nothing the app
// execs can gain any back, even when the daemon runs as root.
func DropCaps() error {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c < 64; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				if err == unix.EINVAL {
					break // past the kernel's last capability
				}
				return fmt.Errorf("drop bounding %d: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient: %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data != [2]unix.CapUserData{} {
		return fmt.Errorf("capabilities remain after capset: %+v", data)
	}
	return nil
}
