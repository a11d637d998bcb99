// Package systemd holds octosupd's systemd user units, octosupd.service and
// octosupd.socket, the files beside this one; it has no code. Its test is
// the installation's: it runs `make install` (and `make uninstall`) into
// temporary directories, checks that every file the units name is
// installed, and follows the README's install steps to a daemon whose demo
// apps run.
package systemd
