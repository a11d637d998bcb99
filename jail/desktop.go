package jail

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

// Desktop sockets and devices (sandbox.sockets, sandbox.devices;
// docs/jail.md, "Desktop sockets and devices").
//
// A granted socket is reached through the guard: the app's filter hands
// every connect to the daemon, which compares the app's address with the
// granted paths byte for byte and, for a match, connects the app's own
// socket (pidfd_getfd) to the path it resolved itself (guard_connect.go).
// The app needs no right on the user's runtime directory, whose other
// sockets (the session bus, a second compositor, an agent's) stay out of
// its reach, and a thread that rewrites the address meanwhile changes
// nothing. The compositor and the sound server see the daemon's
// credentials on the connection, not the app's.

// SocketGrant is one socket an app may reach (helper.SocketGrant).
type SocketGrant = helper.SocketGrant

// How a socket is given: the guard connects the app's socket to the
// server (wayland), or to a filter in front of it (pulseaudio).
const (
	GrantGuard       = helper.GrantGuard
	GrantPulseFilter = helper.GrantPulseFilter
)

// Variables the daemon sets for an app with sockets.
const (
	envRuntimeDir  = "XDG_RUNTIME_DIR"
	envWayland     = "WAYLAND_DISPLAY"
	envPulseServer = "PULSE_SERVER"
)

// resolveSockets finds each granted socket in the daemon's environment
// env, as the client libraries would: WAYLAND_DISPLAY (default
// wayland-0), PULSE_SERVER (one unix: server; default pulse/native),
// each relative to XDG_RUNTIME_DIR unless absolute.
func resolveSockets(names []string, env []string) ([]SocketGrant, error) {
	runtime := lookupEnv(env, envRuntimeDir)
	rel := func(name, from, p string) (string, error) {
		if !filepath.IsAbs(p) {
			if !filepath.IsAbs(runtime) {
				return "", fmt.Errorf("sockets: %s: %s=%q is relative and the daemon has no absolute XDG_RUNTIME_DIR: start octosupd in the user's session (systemctl --user), or set %s to an absolute path", name, from, p, from)
			}
			p = filepath.Join(runtime, p)
		}
		p = filepath.Clean(p)
		if len(p) > helper.MaxSocketPath {
			return "", fmt.Errorf("sockets: %s: %s is longer than a unix socket address holds (%d bytes)", name, p, helper.MaxSocketPath)
		}
		return p, nil
	}
	var out []SocketGrant
	for _, n := range names {
		g := SocketGrant{Name: n, Via: GrantGuard}
		var err error
		switch n {
		case policy.SocketWayland:
			g.From = envWayland
			d := lookupEnv(env, envWayland)
			if d == "" {
				d, g.From = "wayland-0", envRuntimeDir+"/wayland-0"
			}
			g.Path, err = rel(n, envWayland, d)
		case policy.SocketPulseAudio:
			g.From, g.Via = envPulseServer, GrantPulseFilter
			srv := lookupEnv(env, envPulseServer)
			if srv == "" {
				srv, g.From = "pulse/native", envRuntimeDir+"/pulse/native"
			} else if srv, err = pulseUnixServer(srv); err != nil {
				return nil, err
			}
			g.Path, err = rel(n, envPulseServer, srv)
		default:
			return nil, fmt.Errorf("sockets: %q is not a socket octosup grants (want %s)", n, strings.Join(policy.KnownSockets(), ", "))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// pulseUnixServer is the one unix socket a PULSE_SERVER value names:
// "unix:/path" or "/path", optionally "{machine-id}"-prefixed as
// libpulse writes it. A list or a TCP server is refused: the jail grants
// one socket, not a network.
func pulseUnixServer(v string) (string, error) {
	s := strings.TrimSpace(v)
	if strings.HasPrefix(s, "{") {
		if i := strings.IndexByte(s, '}'); i > 0 {
			s = s[i+1:]
		}
	}
	s = strings.TrimPrefix(s, "unix:")
	if !filepath.IsAbs(s) || strings.ContainsAny(s, " \t") {
		return "", fmt.Errorf("sockets: pulseaudio: PULSE_SERVER=%q names no single unix socket: set it to unix:/path, or unset it for $XDG_RUNTIME_DIR/pulse/native", v)
	}
	return s, nil
}

// socketEnv is what an app with sockets finds in its environment: its
// own runtime directory (never the user's), and each socket by its
// absolute path, which every client library takes.
func socketEnv(grants []SocketGrant, runtimeDir string) map[string]string {
	env := map[string]string{}
	if runtimeDir != "" {
		env[envRuntimeDir] = runtimeDir
	}
	for _, g := range grants {
		switch g.Name {
		case policy.SocketWayland:
			env[envWayland] = g.Path
		case policy.SocketPulseAudio:
			env[envPulseServer] = "unix:" + g.Path
		}
	}
	return env
}

// RuntimeDir is an app's own XDG_RUNTIME_DIR, beneath the daemon's
// runtime directory: apps/<id>, made 0700 at each start.
func RuntimeDir(d policy.Dirs, app string) string { return filepath.Join(d.Runtime, "apps", app) }

// RenderNode is one GPU render node and the sysfs directory of its
// device, which Mesa and the Vulkan loader read (vendor, device ids,
// the driver link). The caller finds them (renderNodes).
type RenderNode struct {
	Path   string // /dev/dri/renderD128
	SysDir string // /sys/devices/pci0000:00/0000:00:02.0
}

// driDir holds the GPU's nodes: DRM's major, whose minors from 128 are
// render nodes (below, the primary nodes, card*).
const (
	driDir         = "/dev/dri"
	drmMajor       = 226
	drmRenderMinor = 128
)

// renderNodes lists the render nodes under dir (/dev/dri) and their
// devices' sysfs directories, through /sys/dev/char/MAJ:MIN. A node that
// is not a character device is left out, and so is a card* node, whatever
// its name says: only renderD* nodes are listed.
func renderNodes(dir string) []RenderNode {
	names, _ := filepath.Glob(filepath.Join(dir, "renderD*"))
	var out []RenderNode
	for _, p := range names {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		if unix.Major(st.Rdev) == drmMajor && unix.Minor(st.Rdev) < drmRenderMinor {
			continue // a primary (mode-setting) node under a render node's name
		}
		n := RenderNode{Path: p}
		char := fmt.Sprintf("/sys/dev/char/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		if dev, err := filepath.EvalSymlinks(char + "/device"); err == nil && strings.HasPrefix(dev, "/sys/devices/") {
			n.SysDir = dev
		} else if node, err := filepath.EvalSymlinks(char); err == nil && strings.HasPrefix(node, "/sys/devices/") {
			n.SysDir = node
		}
		out = append(out, n)
	}
	return out
}

// gpuConfig are the read-only places outside the system directories
// that Mesa, libdrm and the Vulkan loader read for a render node; /usr
// (share/vulkan, share/glvnd, share/drirc.d) and /etc (vulkan, drirc)
// are granted to every jail app already, and are listed too, so that a
// narrower system grant keeps them.
var gpuConfig = [...]string{"/sys/dev/char", "/usr/share/vulkan", "/usr/share/glvnd", "/usr/share/drirc.d", "/etc/vulkan", "/etc/drirc", "/etc/glvnd"}

// gpuRules are the rules of devices: ["dri"]: each render node read-write
// with its ioctls (Landlock ABI 5 narrows device ioctls; the DRM ones are
// the driver's whole interface), /dev/dri listable (libdrm enumerates
// it; a card* node in it stays unopenable), each device's sysfs
// directory and gpuConfig read-only.
func gpuRules(nodes []RenderNode) []PathRule {
	var rules []PathRule
	add := func(p string, a Access) {
		if !slices.ContainsFunc(rules, func(r PathRule) bool { return r.Path == p }) {
			rules = append(rules, PathRule{Path: p, Access: a, Why: "gpu", Optional: true})
		}
	}
	add(driDir, AccessList)
	for _, n := range nodes {
		add(n.Path, AccessRead|AccessWrite|AccessDevIoctl)
	}
	for _, n := range nodes {
		if n.SysDir != "" {
			add(n.SysDir, AccessRO)
		}
	}
	for _, p := range gpuConfig {
		add(p, AccessRO)
	}
	return rules
}

// desktopGrants is what the Report says of an app's desktop sockets and
// devices: each socket and how it is given, each render node, or that
// devices: ["dri"] found none on this machine.
func desktopGrants(spec Spec) []helper.Grant {
	var out []helper.Grant
	for _, g := range spec.Sockets {
		out = append(out, helper.Grant{Name: g.Name, Path: g.Path, Via: g.Via})
	}
	dri := false
	for _, r := range spec.Landlock.Paths {
		if r.Why != "gpu" {
			continue
		}
		dri = true
		if r.Access&AccessDevIoctl != 0 {
			out = append(out, helper.Grant{Name: policy.DeviceDRI, Path: r.Path, Via: helper.GrantNode})
		}
	}
	if dri && !slices.ContainsFunc(out, func(g helper.Grant) bool { return g.Name == policy.DeviceDRI }) {
		out = append(out, helper.Grant{Name: policy.DeviceDRI, Via: helper.GrantNoNode})
	}
	return out
}
