// Package rig runs a real octosupd for the programs that measure and
// shake it (bench/, chaos/): a private HOME and XDG tree with a manifest
// checked by octosup's own parser (NewTree), the daemon started on it
// with a NOTIFY_SOCKET and returned once it says READY=1, as systemd
// would see it (Start), and stopped as systemd stops it (Daemon.Stop).
//
// It holds no policy: how long a start may take, which apps run, what
// the caller measures or checks are the caller's. A typical use:
//
//	t, err := rig.NewTree(dir, apps)
//	d, err := rig.Start(ctx, "bin/octosupd", t, rig.Options{Timeout: time.Minute})
//	defer d.Stop(30 * time.Second)
//	c := control.Client{Path: t.Socket}
//
// Several daemons may run on one tree in turn (a restart on the same
// state): Options.Name keeps their NOTIFY_SOCKETs and logs apart.
package rig
