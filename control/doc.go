// Package control is the wire format of octosupd's control socket (SPEC
// §4) and the client that octosupctl and the desktop shell use to speak
// it. It imports nothing of the daemon: the server lives in package
// daemon.
package control
