package jail

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/policy"
)

// standInEnv marks the copy of the test binary that TestRenderNodeStandIn
// runs in a private mount namespace.
const standInEnv = "OCTOSUP_TEST_DRI_STANDIN"

// TestRenderNodeStandIn holds devices: ["dri"] against device nodes: this
// machine has no GPU, so the test gives itself a /dev/dri in a private
// mount namespace (an overlay on /dev, so that the rest of /dev stays the
// host's) with stand-in nodes:
//
//   - renderD128, DRM's render numbers (226:128): no driver is behind them,
//     so an open Landlock lets through ends in the kernel's ENXIO, and one
//     it refuses in EACCES;
//   - card0 (226:0), a primary node, never granted;
//   - renderD129 with a primary node's numbers (226:1) under a render
//     node's name, never granted either;
//   - renderD130 with /dev/null's numbers: a node with a driver, so that
//     its ioctl reaches the driver (ENOTTY) where the grant allows
//     ioctls, and stops at Landlock (EACCES) where it does not.
//
// It needs root (mount, mknod); as another user it is skipped.
func TestRenderNodeStandIn(t *testing.T) {
	if os.Getenv(standInEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("stand-in device nodes need root (a private mount namespace, mknod)")
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRenderNodeStandIn$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), standInEnv+"=1")
		cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		t.Logf("in a private mount namespace:\n%s", out)
		if err != nil {
			t.Fatalf("the stand-in run failed: %v", err)
		}
		if !strings.Contains(string(out), "--- PASS: TestRenderNodeStandIn") {
			t.Fatal("the stand-in run did not pass TestRenderNodeStandIn")
		}
		return
	}
	dri := standInNodes(t)
	node := func(n string) string { return filepath.Join(dri, n) }
	withDRI := func(a *policy.App) { a.Sandbox.Devices = []string{"dri"} }
	launchers(t, func(t *testing.T, h *harness) {
		cases := []escapeCase{
			{name: "a render node without the grant", attempt: jailed(asIs, "open_rw", node("renderD128")), refused: []string{"EACCES"},
				control: jailed(withDRI, "open_rw", node("renderD128")), allowed: "ENXIO"},
			{name: "a primary node", attempt: jailed(withDRI, "open_rw", node("card0")), refused: []string{"EACCES"},
				control: plain("open_rw", node("card0")), allowed: "ENXIO"},
			{name: "a primary node under a render node's name", attempt: jailed(withDRI, "open_rw", node("renderD129")), refused: []string{"EACCES"},
				control: plain("open_rw", node("renderD129")), allowed: "ENXIO"},
			{name: "an ioctl without the grant", attempt: jailed(asIs, "drm_ioctl", node("renderD130")), refused: []string{"EACCES"},
				control: jailed(withDRI, "drm_ioctl", node("renderD130")), allowed: "ENOTTY"},
			{name: "the node directory is listable, nothing more", attempt: jailed(withDRI, "read", node("card0")), refused: []string{"EACCES"},
				control: jailed(withDRI, "ls", dri), allowed: "ok"},
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				runEscapeCase(t, h, c, nil)
			})
		}
		// What status and the log say the app got: the two nodes.
		app := h.probeApp("probe", "ls", dri)
		withDRI(&app)
		o := h.runApp(app, nil, nil)
		want := []helper.Grant{{Name: "dri", Path: node("renderD128"), Via: helper.GrantNode}, {Name: "dri", Path: node("renderD130"), Via: helper.GrantNode}}
		if o.err != nil || !slices.Equal(o.report.Grants, want) {
			t.Errorf("report grants %+v (%v), want %+v", o.report.Grants, o.err, want)
		}
	})
}

// standInNodes mounts an overlay on /dev in this process's (private)
// mount namespace and makes the stand-in nodes under /dev/dri, which it
// returns.
func standInNodes(t *testing.T) string {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Nothing mounted here may reach the host's namespace.
	must("make / private", unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	layers := t.TempDir()
	must("tmpfs", unix.Mount("tmpfs", layers, "tmpfs", 0, "mode=0755"))
	t.Cleanup(func() { unix.Unmount(layers, unix.MNT_DETACH) })
	upper, work := filepath.Join(layers, "upper"), filepath.Join(layers, "work")
	must("mkdir", os.Mkdir(upper, 0o755))
	must("mkdir", os.Mkdir(work, 0o755))
	must("overlay on /dev", unix.Mount("overlay", "/dev", "overlay", 0,
		fmt.Sprintf("lowerdir=/dev,upperdir=%s,workdir=%s", upper, work)))
	t.Cleanup(func() { unix.Unmount("/dev", unix.MNT_DETACH) })
	dri := "/dev/dri"
	must("mkdir /dev/dri", os.Mkdir(dri, 0o755))
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"renderD128", drmMajor, drmRenderMinor}, {"card0", drmMajor, 0}, {"renderD129", drmMajor, 1}, {"renderD130", 1, 3}} {
		must("mknod "+n.name, unix.Mknod(filepath.Join(dri, n.name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))))
	}
	// What the daemon will grant: the stand-ins it lists as render nodes.
	var got []string
	for _, n := range renderNodes(dri) {
		got = append(got, filepath.Base(n.Path))
	}
	if want := "renderD128 renderD130"; strings.Join(got, " ") != want {
		t.Fatalf("render nodes %v, want %s", got, want)
	}
	return dri
}
