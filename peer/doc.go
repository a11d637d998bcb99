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
//  1. A peer's mu guards its app's state. Every step on it (a hub line, a
//     kernel op, a tool call, an answer, a deadline) runs under mu
//     (peer.run) and waits for nothing: what it sends is queued (a hub
//     line, a Kernel or ToolRelay call, a store job, an audit entry), so
//     it leaves in step order. A hub writer past its hard bound shuts its
//     link; a push past the soft bound is ErrQueueFull.
//  2. Store I/O runs off mu, in order, on the app's jobs goroutine, and
//     its result is applied in a later step. Consent and rules are read
//     once by New and written through (policy.go); Approve's job reads
//     only an approval's kind, app and tool, which never change.
//  3. Manager.mu guards peers, kept, manifest, closed and the kernel's
//     attach; relay.mu the relay and its backlog; auditLog.mu its pending
//     entries; jobs.mu its queue. Order: Manager.mu, peer.mu, then one of
//     relay.mu, auditLog.mu, jobs.mu, then the callbacks' locks or a hub's
//     queue lock. No lock is held across store I/O or a socket write that
//     waits: only a line put with Opt.Now on an idle writer is written by
//     its putter, without waiting.
//  4. Callbacks (Events, Kernel, ToolRelay) must neither block nor call
//     the Manager; they run with the app's peer locked (and relay.mu for
//     ToolRelay), but for the backlog AttachKernel hands over under
//     Manager.mu. answered runs before the kernel is visible; Detach
//     unsets it under Manager.mu, and every kernel op re-checks its
//     session in its step.
//  5. Goroutines: the audit loop (New to Close); each link's reader and
//     writer (Attach): a new link reads nothing before its predecessor's
//     teardown, and between lines the reader waits, holding nothing, for
//     a free slot or the UnaskedRate budget; each app's jobs goroutine
//     while jobs are queued; deadlines (time.AfterFunc), one step each.
//     Close waits for all of them. Ping's goroutine stays with a peer
//     that stays locked.
package peer
