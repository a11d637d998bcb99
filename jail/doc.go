// Package jail turns an app's manifest entry into the jail it runs in and
// starts the app inside it (SPEC §2): a scrubbed environment, only fds
// 0–3, no new privileges and no capabilities, Landlock and a seccomp
// filter.
//
// It knows nothing of the peer link or the app's lifecycle: the supervisor
// calls Launcher.Start from its spawner thread and owns the returned
// process.
package jail
