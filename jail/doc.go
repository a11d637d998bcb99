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
// libseccomp (once per rule set) and starts the app by one of two paths,
// which apply the same layers in the same order and report alike:
//
//   - In-process (fork.go, spawn.c; the default on x86-64 from Linux
//     5.11): the daemon builds the Landlock ruleset, and a child forked
//     with clone3(CLONE_VM|CLONE_VFORK|CLONE_CLEAR_SIGHAND) on a stack of
//     its own, from the calling thread, jails itself with raw system
//     calls and execs the program. The child is a new single-threaded
//     process, so its restrictions cover all of it and none of the
//     daemon. Start returns once it exec'd or failed; a failure is the
//     step and errno it wrote before exiting 127.
//   - Through the helper (Config.UseHelper, or where the in-process spawn
//     cannot run): Config.HelperPath run as [path, HelperArg], with the
//     Spec and the BPF in a memfd (never on argv) and a status pipe.
//
// With Request.CgroupFD either path puts the app into that cgroup from
// its first instruction (CLONE_INTO_CGROUP).
//
// The helper is octosup-jail (cmd/octosup-jail), a static binary without
// cgo built from package jail/helper, which holds everything it runs and
// the types it shares with the daemon (Spec, Report, LayerError are
// aliases of that package's). octosupd finds it with FindHelper: next to
// its own executable, or where --jail-helper says. A binary may also be
// its own helper (HelperPath empty, i.e. /proc/self/exe): test binaries
// are, and then main (or TestMain) must begin with
//
//	if jail.IsHelper(os.Args) {
//		os.Exit(jail.RunHelper())
//	}
//
// The helper locks its thread, re-validates the Spec and the filter's
// shape (the native arch check first), marks every descriptor but 0–3
// close-on-exec, sets no_new_privs and the parent-death signal (then
// checks the daemon is still its parent), drops every capability,
// applies Landlock and loads the filter on the thread that execs (raw
// seccomp(2), no TSYNC), writes a Report on the status pipe and execs the
// program. Process.Confirm reads the pipe: a Report then EOF means the
// program runs; anything else is a *LayerError naming the layer and the
// errno ("landlock: open /usr/share/x: ENOENT", "jail: landlock ABI 3 <
// 6"), which is what status shows after "failed: ". An in-process start
// fails with the same errors, from Start (before the fork) or Confirm.
//
// # Layers and kernels
//
// Landlock is go-landlock's: Config.NewRulesetFD builds the ruleset, best
// effort down the ABIs, and the one thread that execs enforces it
// (LandlockRestrictSelf, not go-landlock's all-threads Restrict);
// helper.BuildRuleset is that code, shared with the in-process spawn,
// whose child enforces the ruleset with the raw system call. Each layer is best effort down the Landlock ABIs, and
// the Report says which took (Layers) and which the kernel lacks
// (Missing), never a layer that did not take. Strictness Strict refuses an app whose kernel cannot
// give it every restriction its Spec asks for (Landlock.MinABI).
//
// docs/jail.md is the full account: what an app can and cannot do layer by
// layer, what each manifest field changes, older kernels, known limits,
// and what a start costs.
package jail
