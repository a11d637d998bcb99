// Package peer runs the peer link: the line-framed JSON protocol an app
// speaks on its hub socket (docs/protocol.md) to reach the agent service.
//
// A Manager keeps one peer per app, made at its first Attach and kept
// across restarts (consent, session records); Attach and Detach bring and
// end its current process's link. "octos_peer" frames are decoded strictly
// and handled here; any other object passes through to Events.AppFrame,
// and Send writes such frames down (codec: peer/internal/frame). Identity
// never comes from a frame: the app is the one whose hub the line came on.
// The agent kernel (AttachKernel) answers turn requests and hands apps tool
// calls, each a state machine (tool_call.go) whose ToolRelay hears one
// Acknowledged, then one Finished; host confirmations are approvals
// answered by Approve or a standing rule; finished calls are audited.
//
//	m := peer.New(peer.Config{Store: store, Events: sink, Log: log})
//	defer m.Close()
//	m.SetManifest(manifest)       // at start and after every reload
//	sup := supervisor.New(..., m) // m is its LinkHandler
//	ks, err := m.AttachKernel(kernel, queueAnswer)
//	defer ks.Detach()
//
// # Concurrency
//
//  1. A peer's mu guards all of its app's state; every step on it (a hub
//     line, a kernel op, a tool call, an answer, a deadline) runs under mu
//     (peer.run). Approve's store job reads an approval's kind, app and tool
//     off mu: they never change.
//  2. No step waits for room or for a peer: it queues (a hub line, a Kernel
//     or ToolRelay call, a store job). A writer past its hard bound shuts
//     its link or connection; a push past a hub's soft bound is
//     ErrQueueFull; the relay's backlog drops the oldest outcomes of the app
//     holding most of it, the audit log its newest entries; jobs are not
//     bounded. So what an app's steps send (to its hub, to the kernel)
//     leaves in step order, and apps' steps wait on each other only for
//     rule 5's short shared locks and the log sink (steps log in place).
//  3. Store I/O (sessions, history, turns, Approve's write, read-backs of
//     decisions) runs off mu, in order, on the app's jobs goroutine, and
//     its result is applied in a step. New reads all decisions once; a
//     revoke writes on its caller's goroutine and queues the read-back
//     behind the app's jobs. Consents, Rules and Audit read on the caller's
//     goroutine; the audit loop writes the trail.
//  4. Manager.mu guards peers, kept, manifest, closed and the kernel's
//     attach; amu the approvals index; relay.mu the relay and its backlog;
//     auditLog.mu the pending entries; jobs.mu its queue.
//  5. Lock order: Manager.mu, peer.mu, then one of amu, relay.mu,
//     auditLog.mu, jobs.mu (none takes another, but relay.mu is held across
//     the relay's callbacks), then the callbacks' locks (the daemon's
//     fanout and connection queues) or a hub's queue lock. Manager.mu is
//     held around Attach's step, SetManifest's narrowing, a kernel detach's
//     sweep and AttachKernel's answered and relay drain. No lock is held
//     across store I/O or a socket write that waits: only a line put with
//     Opt.Now on an idle writer is written by its putter, without waiting.
//  6. Callbacks (Events, Kernel, ToolRelay) must neither block nor call the
//     Manager. They run with the app's peer locked, but for the outcomes an
//     AttachKernel hands over (under Manager.mu and relay.mu). answered runs
//     before the kernel is visible; Detach unsets it and ends its requests
//     under Manager.mu, and every kernel op re-checks its session in its
//     step: once Detach returns the kernel hears and changes nothing.
//  7. Goroutines: the audit loop (New to Close); each link's reader and
//     writer (Attach): once the link is shut the reader waits for the
//     writer, then tears the link down, and a new link reads nothing before
//     its predecessor's teardown; between lines the reader waits, holding
//     nothing, for a free slot or the UnaskedRate budget. Each app's jobs
//     goroutine lives while jobs are queued. Deadlines (time.AfterFunc) each
//     run one step that finds its object ended if a teardown or Close came
//     first. Close waits for teardowns and jobs, stops armed deadlines and
//     waits for fired ones. Ping's goroutine stays with a peer that stays
//     locked.
package peer
