// Command octosup-chaos runs a real octosupd in a private HOME and XDG
// tree with many jailed apps (chaos/app), attaches as the agent kernel and
// issues thousands of tool calls of every kind — read, write, destructive
// and unknown risks; confirm none, host and app; deadlines from 1 ms to a
// few seconds; behaviours from a plain ok to an app that never answers,
// answers twice or crashes — while a driver SIGKILLs and restarts apps,
// answers or ignores the person's approvals (some with remember), revokes
// standing rules, closes accounts, and detaches and re-attaches the
// kernel. Then it stops issuing, waits until every accepted call has its
// outcome, SIGKILLs the daemon and starts it again on the same state.
//
// It checks, and a violation fails the run (exit 1) with the whole
// history of the call (every event of that call id, timestamped):
//
//   - every accepted call got exactly one tool.finished, after exactly one
//     tool.acknowledged, outcomes produced while no kernel was attached
//     included (they are delivered on the next attach);
//
//   - no event for a call that was refused or never sent, none before the
//     call's "accepted" answer, no call accepted twice;
//
//   - a read call never ends outcome_unknown, and an ok outcome carries
//     the data of its own call;
//
//   - every approve with remember answered ok (less the rules revoked
//     since) is in force before the daemon's death and after it, and no
//     other rule is;
//
//   - no app process outlives the daemon (every app pid seen, checked
//     through a pidfd after the SIGKILL);
//
//   - the daemon's fds, goroutines and RSS return to their baseline after
//     the storm (the debug op; tolerances in budget.go).
//
//     make chaos                                   # 2 minutes, 60 apps
//     bin/octosup-chaos --duration 30s --apps 20 --seed 42
//
// The seed decides every choice of the kernel and the driver; the
// scheduling of a loaded machine does not replay, so a replay retraces
// the same storm, not the same interleaving.
package main
