// Package peer runs the peer link: the line-framed JSON protocol an app
// speaks on its hub socket (docs/protocol.md) to reach the agent
// service.
//
// A Manager holds one peer per app, created when the app is first attached
// and kept across its restarts: its consent, and the daemon's session
// records. A peer's link is the hub of the app's current process; it comes
// with Attach and goes with Detach (or when the app stops reading). Frames
// under "octos_peer" are decoded strictly and handled here; any other
// top-level object passes through to Events.AppFrame, and Send writes such
// frames down. The codec of those frames, and the link's error codes, are
// peer/internal/frame's.
//
// The daemon wires it:
//
//	store, err := policy.OpenStoreWith(policy.StoreConfig{Path: filepath.Join(dirs.State, policy.StoreFile)})
//	m := peer.New(peer.Config{Store: store, Events: sink, Log: log})
//	defer m.Close()
//	m.SetManifest(manifest) // and after every reload: narrowed grants apply to the live links at once (narrow.go)
//	sup := supervisor.New(..., m) // m satisfies the supervisor's LinkHandler
//	ks, err := m.AttachKernel(kernelConn, queueAnswer) // a control connection's kernel.attach
//	defer ks.Detach()
//
// Tool calls go the other way (docs/protocol.md, "Tool calls"): the
// agent hands a call to ToolCall (the control socket's tool.call, through
// the attached KernelSession), and the installed ToolRelay hears exactly
// one Acknowledged and then one Finished for it. Each call is one explicit
// state machine (tool_call.go) with its deadline on the monotonic clock;
// host confirmations are approvals of kind "tool" answered by Approve or a
// standing rule (policy.Store rules); every finished call is written to
// the audit trail in batches.
//
//	ks, err := m.AttachKernel(kernel, queueAnswer) // kernel is also a ToolRelay
//	err = ks.ToolCall("notes", control.ToolCall{CallID: "c1", Name: "notes.search",
//		Args: args, Risk: control.RiskRead, TimeoutMS: 30000, ContextID: ctx}, queueAccepted)
//
// Identity never comes from a frame: the app is the slot whose hub the
// line arrived on, and strict decoding refuses members the protocol does
// not define (an "app" or "account" member is bad_frame, not ignored).
//
// # Concurrency
//
//  1. One mutex per app. A peer's mu guards all of its app's state (link,
//     requests, contexts, tool calls, approvals, choices, duplicate
//     window), and every step that touches it holds mu (peer.run): a
//     line from the hub (the link's reader, one at a time), a kernel's
//     reply or event, a tool call, an answer, a timer. (Approve's store
//     job reads an approval's kind, app and tool off mu: they are fixed
//     when it is raised.)
//  2. No step waits for room or for a peer. What it sends is queued (or,
//     rule 5, written without waiting): a line on the hub's linewriter, a
//     Kernel or ToolRelay call (which queue on the kernel's connection or
//     drop it), a store job. A writer past its hard bound shuts its link
//     or connection there and then, closing its socket; a push past a
//     hub's soft bound is refused (ErrQueueFull); the relay's backlog
//     drops the oldest outcomes of the app that holds the most of it,
//     the audit log its newest entries; the
//     jobs queue is not bounded. Log lines are written in steps: a
//     stalled log sink stalls the app that logs. So what an app sends,
//     to its hub and to the kernel, leaves in the order its steps ran;
//     an app's step waits on another app's only for the short locks they
//     share (amu, relay.mu, auditLog.mu, the kernel connection's queue
//     lock), and relay.mu is held across the relay's callbacks, so one
//     that logs holds up every app's tool-call steps.
//  3. Store I/O that follows an app's steps (sessions, history, turns,
//     Approve's write, every read-back of the app's decisions) runs off
//     mu, in order, on the app's jobs goroutine (jobs.go), and what it
//     brings back is applied in a step. Every app's consent and standing
//     rules are read once, by New; a revoke writes the store on its
//     caller's goroutine and queues the read-back behind what the app's
//     jobs hold (policy.go), so the peer ends with what the store holds.
//     Lists (Consents, Rules, Audit) read on the caller's goroutine; the
//     audit trail is written in batches by the audit loop (by Close's
//     goroutine, once the loop ended).
//  4. The other locks guard maps and queues: Manager.mu the peers, the
//     decisions kept for apps with no peer yet, the manifest, closed and
//     the kernel's attach; Manager.amu the index of pending approvals;
//     relay.mu the tool relay and the outcomes kept while none is
//     installed (held across its callbacks); auditLog.mu the entries
//     waiting for their batch; a jobs' mu its queue.
//  5. Lock order: Manager.mu, a peer's mu, then amu, relay.mu,
//     auditLog.mu or a jobs' mu (none of which takes another, but
//     relay.mu the callbacks'), then the callbacks' (the daemon's fanout
//     and connection queue locks) or a hub's queue lock. Manager.mu is
//     held around Attach's step, a reload's narrowing and a kernel
//     detach's sweep (each peer's step in turn), and AttachKernel's
//     answered and relay drain: these wait for the steps in progress, and
//     whatever takes Manager.mu (Attach, a call's or a frame's lookup of
//     its peer) waits for them. No lock is held across store I/O or a
//     socket write that waits: a queue lock is let go before any write; a
//     line put with Opt.Now on an idle writer is written by its putter
//     with a write that does not wait, every other by the writer's
//     goroutine. Log lines are written under whatever lock their writer
//     holds.
//  6. Callbacks (Events.Approval, Events.AppFrame, the Kernel's and the
//     ToolRelay's) must neither block nor call the Manager. They run with
//     the app's peer locked, but for the outcomes a relay's install hands
//     over, which run under relay.mu (and Manager.mu in AttachKernel).
//     AttachKernel runs its caller's answered before the kernel is
//     visible, so the kernel hears that answer first; KernelSession.Detach
//     unsets the kernel and ends its requests in one step under
//     Manager.mu, and a kernel's reply, event, call or cancel is checked
//     against it in its own step, so once Detach returns the kernel hears
//     nothing more and changes nothing. Attach and AttachKernel log after
//     they let go.
//  7. Goroutines: the audit log's loop (started by New, ended by Close);
//     each link's reader and writer (started by Attach; once the link is
//     shut the reader waits for the writer, then tears the link down, and
//     Close waits for every teardown; between lines the reader may wait,
//     holding nothing, for a free slot or for the app's budget of unasked
//     lines, Config.UnaskedRate, until the link shuts); each app's jobs goroutine (alive
//     while jobs are queued; Close waits for the queue); the deadlines of
//     a consent prompt, a kernel request and a tool call (time.AfterFunc),
//     each running one step, which finds its object ended if a teardown
//     or Close came first (Close stops those still armed and waits for
//     those that fired); and Ping's, which waits with a peer that stays
//     locked. Manager.Detach only shuts a link, and a new process's link
//     reads no line before the old link's teardown is done.
package peer
