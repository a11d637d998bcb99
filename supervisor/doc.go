// Package supervisor runs the native apps of a manifest and keeps each one
// in an explicit state (docs/spec.md, "Lifecycle"): starting, running, stopping, stopped
// (with the last exit: code or signal, and time) or failed (with the
// reason it could not start).
//
// # Use
//
//	sup, err := supervisor.New(supervisor.Config{
//		Launcher: jail.NewLauncher(jailCfg), Links: peers, Dirs: dirs,
//		BaseEnv: os.Environ(), Log: log,
//		Publish: server.event, // every event, in the step that makes it
//	})
//	go sup.Run(ctx)                 // returns once ctx is done and every app is stopped
//	done, err := sup.Apply(ctx, manifest, supervisor.ApplyOptions{}) // first load, and every reload
//	st, err := sup.Restart(ctx, "notes")
//	err = sup.FollowLogs("notes", 100, join) // the last lines, then Publish has every line after
//
// Apply makes a validated manifest the set of apps: added apps start when
// they are autostart, removed ones stop and vanish, and a running app
// whose process would now run differently (its compiled jail, program,
// arguments, environment or directory; Launcher.Spec compiles both
// entries) is restarted, or with ApplyOptions.KeepRunning left running
// and marked AppStatus.Stale until it is restarted. It returns once those
// starts, stops and restarts are done, with what it did (Applied), which
// needs Run: start Run first. Start, Stop and
// Restart return once the app has reached its state; a start that fails
// returns an error wrapping ErrStartFailed and its cause (jail.ErrNoProgram,
// a *jail.LayerError, ErrStartTimeout, …) along with the failed status,
// whose Reason is the same text.
// Status and Logs only copy what is kept in memory. CheckCaller says
// whether a process, held by a pidfd (a control-socket peer), is
// positively outside every app (caller.go): it refuses one in the apps'
// cgroup subtree, one that is or descends from an app's process, and one
// it cannot place (gone, a zombie, a reused pid, unreadable).
//
// Each app has one goroutine that alone starts, signals and reaps its
// processes and moves its state, through one function that refuses
// illegal moves; commands, exits and timers reach it over channels. The
// LinkHandler's Attach and Detach run on that goroutine: they must return
// promptly (a call that takes over a second is logged).
//
// # Processes
//
// Every app process is forked by the Launcher (the jail) from one goroutine
// locked to its OS thread for the life of Run: the kernel ties
// PR_SET_PDEATHSIG to the forking thread, and a thread Go retires would
// otherwise kill the apps it forked. Each process leads a session of its
// own (the launcher calls setsid; a process that does not is killed and
// its start fails), gets a hub socketpair as fd 3 (handed to the LinkHandler once the
// process runs) and a pipe per output stream, read line by line (at most 4
// KiB a line) into a bounded per-app ring and the daemon's log. Lines and
// state moves are numbered as they happen (LogLine.Seq, AppStatus.Seq,
// one count each for the supervisor) and published in that order: a line
// under its ring's lock, a move under the supervisor's, to Config.Publish
// (which must not block), the one way out of the supervisor an event has.
// So Publish hears of a move
// before the move's caller does, and FollowLogs, which reads the ring
// under the same lock, splits the lines of the app's runner exactly
// between what it returns and what Publish is handed after.
//
// A process's death is noticed at once without a thread per child: its
// pidfd is non-blocking and parked in Go's netpoller. The app's runner
// goroutine is the one place that waits (waitid on the pidfd). Before it
// reaps the leader it SIGKILLs what remains of the app (procs.go): its
// process group, its session, their descendants and, for a broad app
// without a cgroup, the strays below. What remains of an app once its
// main process is gone dies with it, like systemd's
// KillMode=control-group, and the kill cannot hit a reused pid: the
// unreaped leader still holds the group and session id, and every other
// process is signalled through a pidfd opened before its start time is
// checked.
//
// Run makes the daemon a child subreaper (PR_SET_CHILD_SUBREAPER, as
// systemd --user is): a process of an app whose parent dies is
// re-parented to the daemon, not to init, so it stays findable (CheckCaller
// refuses it, a stop kills it) and is reaped here. A goroutine Run owns,
// woken by SIGCHLD, reaps those strays: zombie children of the daemon
// that are no app's main process (each runner reaps its own) and not in
// the daemon's own session; it stops once every runner has returned.
// While a fork is under way it leaves the zombies alone (the new process
// is not in the books yet) and the end of the fork wakes it again. It
// looks before it scans /proc: a SIGCHLD whose next zombie is an app's
// main process (most are) costs no scan, and that process's reap by its
// runner wakes it again.
//
// Where the daemon may create cgroups in its own cgroup v2 (root, or a
// systemd service with Delegate=yes; cgroup.go), each process is forked
// straight into a leaf of its own (jail.Request.CgroupFD,
// CLONE_INTO_CGROUP), and the SIGKILLs above also go to the whole leaf
// through cgroup.kill, and a stop's SIGTERM to every process of the
// leaf. AppStatus.Stopper says "cgroup" then, "process-group"
// elsewhere. At start the
// supervisor kills and removes the leaves of a daemon that is gone (one
// SIGKILLed, whose apps' descendants outlived it).
//
// The state change that ends a process (its stopped or failed event) is
// published once the leader is reaped, its leaf (if any) is empty, its
// output is read to the end and its link is detached; what only tidies up
// (the empty leaf's removal, the daemon's log line) comes just after it,
// before the app's goroutine serves anything else, and before a Stop is
// answered.
//
// Stop sends SIGTERM to every process of the app (main process by pidfd,
// group, session and descendants, leaf) and SIGKILL to all of them after
// Config.StopGrace. Once the main process has exited, the rest of the app
// has what is left of the grace to end too (systemd waits for the whole
// cgroup the same way); then the kill step SIGKILLs what is left, round
// after round for at most 2s (killDrain), and logs any survivor. A stop
// therefore ends within the grace plus that bound, and so does the
// daemon's shutdown.
//
// An app is starting from the fork until the jail reports that the app's
// program runs; its pid shows as soon as it is known. The report is read
// by a goroutine of its own, so the app's goroutine keeps serving the app
// meanwhile: a Start or Restart joins the start under way; a Stop, the
// app's removal or shutdown cancel it (the app becomes stopped); and a
// process that has not reported within Config.StartTimeout (30s) fails
// the start with ErrStartTimeout. A cancelled start SIGKILLs the group,
// reaps the leader and then reads the jail's status to its end, so that
// nothing is left open; so does every other failed start.
//
// An Exit is one of three kinds: "exited" with the status in Code,
// "signaled" with the signal's name ("SIGTERM", or "SIGRTMIN+N" for the
// real-time signals) and number, and Code -1, or "unknown" (the status
// was lost; Code -1). Only an exit with status 0 is clean.
//
// # What is not guaranteed
//
// With the process-group stopper the supervisor knows an app's processes
// by a scan of /proc: its session, their descendants, and the strays. A
// jail app cannot leave its session (its filter refuses setsid); a broad
// app's process that does and whose parent then exits is a stray, which
// cannot be told apart from another broad app's: it is killed at the stop
// or exit of any broad app of the daemon, and CheckCaller refuses it (an
// orphan of an app) whatever it is.
// When the daemon itself dies (SIGKILL, a crash), each app's leader dies
// with it (its parent-death signal), but the leader's descendants get no
// such signal and can outlive the daemon (TestDaemonKilled checks the
// leaders only). With the cgroup stopper those descendants die at the next
// daemon start, and under systemd at once, since systemd kills the
// service's cgroup. CheckCaller finds
// a process by its leaf, so a setsid descendant is found too, and by its
// ancestors' leaves once it is moved out of its own. A descendant moved
// out of its leaf whose app processes above it have all exited was
// re-parented to the daemon, and is refused as an orphan of an app.
//
// # Restart policy
//
// restart "on-request" (the default): a process that ends on its own
// leaves its app stopped, with the exit recorded, until Start or Restart.
//
// restart "on-failure": a process that ends with a non-zero status or by a
// signal is restarted after a delay of 100ms, doubled after each further
// failure up to 30s; a process that ran for 10s or more starts the delays
// again from 100ms. Like systemd's default start limit, an app that would
// be started a sixth time within 10s (5 starts in 10s) is given up on and
// becomes failed with reason "start limit hit". A clean exit (status 0)
// leaves the app stopped. A Start or Restart by request resets the
// history.
package supervisor
