// Package helper is the jail helper: the code that runs between fork and
// exec of every jailed app, and the data it shares with the daemon (the
// Spec, the Report, the LayerError, the status protocol). It is small on
// purpose and imports no cgo: no libseccomp, no logger, no manifest
// parser, so that cmd/octosup-jail, the binary built from it, is a static
// Go binary that starts in about a millisecond instead of the ~7 ms the
// daemon's own cgo binary takes.
//
// The daemon (package jail) compiles an app's Spec and its seccomp filter
// (with libseccomp, to classic BPF) and starts the helper as
// [octosup-jail, Arg] with the Input (EncodeInput) in a memfd on InputFD
// and a status pipe on StatusFD; 0–3 are the app's. Run re-validates both
// (DecodeInput: Spec.Validate, and CheckFilter, which insists on the
// native architecture check in front), locks its thread, marks every
// descriptor but 0–3 close-on-exec, sets no_new_privs and the
// parent-death signal (and checks the daemon is still its parent), drops
// every capability, enforces Landlock on that thread (go-landlock, pure
// Go), loads the filter on that thread with seccomp(2) and no flags,
// writes a Report on the status pipe and execs the program. A failure is
// written instead, as a LayerError, and the helper exits with Exit;
// ParseStatus reads either on the daemon's side.
//
// The package jail builds the Landlock ruleset of its in-process spawn
// with the same code (BuildRuleset, PathRights), and test binaries that
// re-execute themselves as the helper call Run when IsHelper(os.Args).
package helper
