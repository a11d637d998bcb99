// Package jail turns an app's manifest entry into the jail it runs in and
// starts the app inside it (docs/jail.md): a scrubbed environment, only fds
// 0–3, no new privileges and no capabilities, Landlock and a seccomp
// filter. It knows nothing of the peer link or the app's lifecycle.
//
// # Compiling
//
// Compile is pure: an entry plus Options (developer mode, the user's
// directories, the daemon's environment, OCTOSUP_SANDBOX_NARROW, the
// strictness, and the machine facts the caller resolved: the program's
// interpreters, where /etc's symlinks lead) give a Spec, the same Spec
// every time. A Spec is plain data: the paths the app may reach with their
// rights, the TCP ports, the Landlock scoping, the seccomp rules, the
// environment, the descriptors. Describe renders it for a person;
// json.Marshal renders it for a script. Launcher.Spec compiles the spec a
// request would get, without starting anything (octosupctl's view).
//
// # Starting
//
// The supervisor calls Launcher.Start from its one spawner goroutine,
// locked to its OS thread (a child's parent-death signal is tied to the
// thread that forked it). Start compiles the seccomp rules to BPF with
// libseccomp (once per rule set), prepares the jail in the daemon
// (prepare.go: the spec and the filter checked, the Landlock ruleset
// built, the exec's arguments laid out for the exec gate, the report
// worked out) and hands it to one of two launchers, which run the one
// setup sequence (package jail/spawn, in C) on the same prepared input
// and report alike:
//
//   - In-process (fork.go; the default on x86-64 from Linux 5.11): a
//     child forked with clone3(CLONE_VM|CLONE_VFORK|CLONE_CLEAR_SIGHAND)
//     on a stack of its own, from the calling thread, runs the sequence
//     with raw system calls and execs the program. The child is a new
//     single-threaded process, so its restrictions cover all of it and
//     none of the daemon. Start returns once it exec'd or failed; a
//     failure is the step and errno it wrote before exiting 127.
//   - Through the helper (launch_helper.go; Config.UseHelper, or where
//     the in-process spawn cannot run): Config.HelperPath run as [path,
//     HelperArg], with the prepared input in a memfd (never on argv) and
//     a status pipe, on which it writes the same step and errno; Confirm
//     reads it.
//
// With Request.CgroupFD either launcher puts the app into that cgroup
// from its first instruction (CLONE_INTO_CGROUP).
//
// The helper is octosup-jail (cmd/octosup-jail), a binary that links
// package jail/spawn and libc only. octosupd finds it with FindHelper:
// next to its own executable, or where --jail-helper says. Every binary
// that links this package is a helper too (HelperPath empty, i.e.
// /proc/self/exe: the test binaries), because jail/spawn's constructor
// runs the sequence before the Go runtime starts when argv says so; a
// main may still begin with
//
//	if jail.IsHelper(os.Args) {
//		os.Exit(jail.RunHelper())
//	}
//
// which only a binary whose C constructors did not run ever reaches.
// Spec, Report and LayerError are aliases of package jail/helper's.
//
// # Layers and kernels
//
// Landlock is go-landlock's: Config.NewRulesetFD builds the ruleset, best
// effort down the ABIs, and the one thread that execs enforces it
// (landlock_restrict_self in the sequence, not go-landlock's all-threads
// Restrict); helper.BuildRuleset is that code, run in the daemon for both
// launchers. Each layer is best effort down the Landlock ABIs, and
// the Report says which took (Layers) and which the kernel lacks
// (Missing, which also names unprivileged_user for a root daemon's apps),
// never a layer that did not take. Strictness Strict refuses an app whose kernel cannot
// give it every restriction its Spec asks for (Landlock.MinABI).
//
// # Goroutines
//
// A Guard (guard.go) is served by Serve on a goroutine its caller owns,
// for the app's life; it answers the app's notified calls in line, one at
// a time, but for connects, and pauses when the app's budget of the
// daemon's CPU is spent (budget.go). A connect it hands to a goroutine of
// its own, with its own copy of the listener, never makes one in line:
// the goroutine ends when its connect does, which nothing bounds for a
// listener that never accepts, so each holds one of the app's 16 slots,
// kept across its processes and restarts (Launcher.connectSlots, under
// the Launcher's slotsMu), and past them a connect is EAGAIN. Serve does
// not wait for those goroutines; they spend from the Guard's budget under
// its spentMu. The file facts (facts.go) are shared by every Spec call
// under one mutex, never held across a read of the disk.
//
// docs/jail.md is the full account: what an app can and cannot do layer by
// layer, what each manifest field changes, older kernels, known limits,
// and what a start costs.
package jail
