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
//	m.SetToolRelay(relay)   // or attach a Kernel that is also a ToolRelay
//	err := m.ToolCall("notes", control.ToolCall{CallID: "c1", Name: "notes.search",
//		Args: args, Risk: control.RiskRead, TimeoutMS: 30000, ContextID: ctx})
//
// Identity never comes from a frame: the app is the slot whose hub the
// line arrived on, and strict decoding refuses members the protocol does
// not define (an "app" or "account" member is bad_frame, not ignored).
//
// # Concurrency
//
// One mutex per app orders everything of that app: a peer's mu guards
// its state (its link, requests, contexts, tool calls, approvals,
// consent and standing rules, duplicate window), and every step that
// touches it runs with mu held: a line from the app's hub (on the link's
// reader, one line at a time), a kernel's reply or event, a tool call,
// an answer, a timer. No step waits: what it sends is queued (a line on
// the hub's linewriter, a call of the Kernel or the ToolRelay, which
// queue on the kernel's connection or drop it, a store job), so one
// app's steps never wait on another's, and what each app sends, to its
// hub and to the kernel, leaves in the order its steps ran.
//
// The app's store I/O (sessions, history, turns) runs off mu, in order,
// on the app's own jobs goroutine (jobs.go), and comes back as a step: a
// stalled store stalls that app's store requests alone. Its consent and
// standing rules are read once, when the Manager starts, so every check
// is a lookup; Approve writes the store (fsync'd, no lock held) on the
// app's jobs and reads the app's decisions back into the peer in the same
// job, and a revoke writes the store and then has the jobs read them back
// behind anything queued before it: per app, the peer ends with what the
// store holds, whatever the order approves and revokes ran in
// (policy.go). If the Manager could not read them at start, every request
// that needs a consent fails internal until the daemon restarts.
//
// The other mutexes guard maps and one queue: Manager.mu the registry of
// peers, the manifest, closed and the kernel's attach (it is held around
// a peer's step where the peers must see manifests and attaches in one
// order); Manager.amu the index of pending approvals; relay.mu the tool
// relay and the outcomes kept while none is installed, held across the
// relay's callbacks; auditLog.mu the audit entries waiting for their
// batch (written by the audit log's one goroutine); a jobs' mu its
// queue. Lock order: Manager.mu, then a peer's mu, then amu, relay.mu,
// auditLog.mu or a jobs' mu (none of which takes another, but relay.mu
// the callbacks'), then what the callbacks take (the daemon's: its
// fanout's locks and a connection's queue lock) or a hub's queue lock.
// No lock is held across a wait on disk or socket: a line put on an idle
// linewriter is written by its putter at once, without blocking. Log
// lines are written in steps, as they were on the app's serial before:
// a stalled log sink stalls the app that logs (and, for the two kinds of
// step taken under Manager.mu, a reload's narrowing and a detach's
// sweep, the Manager); Attach and AttachKernel log after they let go.
//
// AttachKernel runs its caller's answered (the control socket queues
// kernel.attach's answer there) before the kernel is visible, so the
// kernel hears that answer before anything else. Detach unsets the
// kernel and ends its requests in one step under Manager.mu: once it
// returns, every peer has been locked after the kernel went, and the
// kernel hears nothing more; no next kernel attaches in between.
// Events.Approval, Events.AppFrame and the Kernel and ToolRelay
// callbacks run with the app's peer locked and must not block nor call
// the Manager: an app's reply to a frame Send wrote (with its sent
// callback, in one step) is published after it. The outcomes kept while
// no relay is installed are bounded in number (Config.RelayQueue) and in
// bytes (relayQueueBytes, half of what a control connection holds
// unread), so that a next kernel's attach can take them all at once.
// Detach only shuts the link and Attach waits at most for its peer's step
// in progress: neither waits for a link's end, and a new process's link
// reads no line before the old link's teardown is done.
package peer
