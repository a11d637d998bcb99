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
// frames down.
//
// The daemon wires it:
//
//	store, err := policy.OpenStore(filepath.Join(dirs.State, policy.StoreFile))
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
// The Manager's lock is never held across disk I/O: sessions opened,
// history read and turns recorded go through one queue of store jobs
// (store_jobs.go) in order, Approve writes its answer (fsync'd) before it
// acts on it, off the lock, and an app's consent decision (once) and a
// host call's standing rule are read before the lock is taken to use
// them (a revoke or a new rule meanwhile has them read again). Attach and Detach never wait for a
// teardown: a new process's link handles no line before the old link's
// teardown is done. Each link's writer gathers what is queued into one
// write; a frame the app alone waits on (the only call out, the reply to
// the only open request) is written by its sender instead, without
// blocking: what the socket does not take at once goes to the writer.
//
// Events.Approval and the Kernel's methods are called with the Manager's
// lock held, so that the order they see is the order things happened in;
// Events.AppFrame is called from the app's reader. All of them must return
// promptly (queue, or drop for a slow subscriber) and must not call back
// into the Manager.
package peer
