// Package helper is the daemon's side of the jail that both launchers
// share, and the data the jail is made of: the Spec and its validation,
// the Report and the LayerError a start ends with, the check of a
// seccomp program's front (CheckFilter, RefuseNewer), the Landlock
// ruleset built with go-landlock (BuildRuleset, PathRights,
// LandlockMissing, OpenGrant) and the exec gate (ExecArgs, Arena, Gate).
// It is pure Go and imports no libseccomp.
//
// It runs nothing between fork and exec: that is the setup sequence of
// package jail/spawn, written once in C, which the in-process spawn and
// the helper binary (cmd/octosup-jail) both run on what package jail
// prepared with this package.
package helper
