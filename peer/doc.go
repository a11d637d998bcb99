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
//	ks, err := m.AttachKernel(kernelConn) // a control connection's kernel.attach
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
// Each app's state (its link, requests, contexts, tool calls, approvals,
// consent cache and duplicate window) belongs to its peer and is touched
// only by the functions run on the peer's serial (serial.go): one at a
// time, in the order posted, by the serial's goroutine or by a caller
// that found it idle; the app's store I/O runs on a second serial of its
// own, and the Kernel, ToolRelay and their queue on a third, the feed,
// shared by every app, whose callbacks are posted, never run on the
// poster's serial: a kernel that blocks holds up no app's hub. The
// mutexes guard maps, queues and one value only, and nothing is called,
// read or written under them: Manager.mu
// the registry of peers, the index of pending approvals, the manifest,
// closed and the kernel's attach; each serial's mu its queue; auditLog.mu
// the audit entries waiting for their batch (written by the audit log's
// one goroutine); a peer's statusMu the link status it published last. Lock
// order: Manager.mu before a serial's mu, and nothing else nests; posting
// to a serial never blocks. A caller that finds a serial idle
// may run the function itself (serial.call: a tool call, a hub's line),
// so such calls are made with no lock held. One wait nests: a kernel's
// tool call (KernelSession.ToolCall) runs its accepted on the feed from
// the app's serial and waits for it, which cannot close a loop because
// nothing on the feed waits for an app's serial. A kernel attached held
// (AttachKernelHeld, the control socket's kernel.attach) hears nothing
// until its Start, so that it hears its attach's answer first: the feed
// holds its calls, in order, and goes on with everything else.
//
// So no lock is held across disk or socket I/O: a consent decision, a
// standing rule, sessions, history and turns are read and written on the
// app's store serial, and a stalled store stalls that app alone; Approve
// writes its answer (fsync'd) in its caller before the peer acts on it,
// and the revokes theirs;
// the hub's writes go through its linewriter, which holds no lock across
// a write(2). Events.Approval is called on the app's serial and
// Events.AppFrame on the app's reader; the Kernel and ToolRelay callbacks
// on the feed, in the order each app's peer posted them. None is called
// with a lock held; all must return promptly (queue, or drop for a slow
// subscriber) and must not wait on the Manager. Attach and Detach never
// wait for a teardown: a new process's link handles no line before the
// old link's teardown is done.
package peer
