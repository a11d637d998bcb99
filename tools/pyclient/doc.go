// Package pyclient holds the control-socket client in Python
// (octosup_control.py) and the README's walkthrough it runs
// (walkthrough.py), standard library only, written from docs/control.md
// and configs/schema alone: what a shell author reads first. Its Go test
// runs the walkthrough against a real octosupd with the demo notes app and
// a hub app that starts a turn; make test runs it.
package pyclient
