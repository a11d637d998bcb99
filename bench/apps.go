package main

import (
	"fmt"
	"os"
	"path/filepath"

	"octosup/policy"
)

// The jails the benchmarks compare, as manifest sandboxes.
func broadSandbox() policy.Sandbox {
	return policy.Sandbox{Policy: policy.PolicyBroad, Network: policy.NetworkFull}
}

func jailSandbox(processes bool) policy.Sandbox {
	return policy.Sandbox{Policy: policy.PolicyJail, Network: policy.NetworkNone, Processes: &processes}
}

// hubpingApp is a manifest entry running hubping. With a FIFO the app
// pings it, and a jail gets the FIFO's directory as an rw external: the
// only place outside the system it may write.
func hubpingApp(id, hubping string, f *fifo, sb policy.Sandbox, autostart bool) policy.App {
	a := policy.App{
		ID:        id,
		Exec:      []string{hubping},
		Autostart: autostart,
		Restart:   policy.RestartOnRequest,
		Sandbox:   sb,
	}
	if f != nil {
		a.Exec = append(a.Exec, f.Path)
		if sb.Policy == policy.PolicyJail {
			a.Sandbox.External = []policy.External{{Path: filepath.Dir(f.Path), Access: policy.AccessRW}}
		}
	}
	return a
}

// appFIFO makes dir/<id>/ping, the FIFO of one app, alone in its
// directory so that an app's rw external holds nothing else.
func appFIFO(dir, id string) (*fifo, error) {
	d := filepath.Join(dir, "fifo", id)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("FIFO directory: %w", err)
	}
	return newFIFO(d, "ping")
}

// bwrapArgs runs argv under bubblewrap with every namespace unshared and
// the binds the jail's Landlock rules amount to: the system read-only,
// the program read-only, the FIFO's directory read-write, /dev and /proc.
// --die-with-parent, --new-session and --cap-drop ALL stand for the
// jail's parent-death signal, TIOCSTI filter and dropped capabilities.
func bwrapArgs(bwrap string, rwDir string, argv []string) []string {
	args := []string{bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}
	for _, p := range []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args, "--ro-bind", argv[0], argv[0], "--bind", rwDir, rwDir, "--dev", "/dev", "--proc", "/proc", "--")
	return append(args, argv...)
}
