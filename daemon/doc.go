// Package daemon is octosupd: it loads the manifest, starts the
// supervisor, serves the control socket and talks to systemd (readiness,
// status, watchdog, socket activation).
//
// # Who may use the control socket
//
// A connection is checked once, when it is accepted, and refused with a
// not_permitted line saying why (and a log line with the peer's pid, uid
// and how its pidfd was had) unless both hold:
//   - the peer's uid (SO_PEERCRED) is the daemon's;
//   - the supervisor places the peer positively outside every app
//     (supervisor.Supervisor.CheckCaller, through Apps.CheckCaller).
//
// The peer is held by a pidfd of the very process that called connect():
// SO_PEERPIDFD (Linux 6.5). A peer that has exited (reaped or a zombie)
// by the time it is checked is refused, as is one for which no pidfd can
// be had. Where the kernel answers SO_PEERPIDFD with ENOPROTOOPT (before
// 6.5), the pidfd is opened on the SO_PEERCRED pid, and a process there
// that started after the accept (clock ticks of /proc/PID/stat, 10 ms) is
// taken for a reused pid and refused. That leaves a window on such
// kernels: a pid the peer freed and another process took between the
// peer's connect and the daemon's accept, or within the accept's clock
// tick, is checked in the peer's stead; the daemon logs once that it runs
// so. Only the ENOPROTOOPT answer is simulated in the tests
// (Server.peerPidfd); the kernel here has SO_PEERPIDFD.
//
// Run is the whole daemon; cmd/octosupd only parses flags and turns
// signals into the cancellation of Run's context. The control server is
// usable on its own (NewServer, Server.Serve) with any Apps, which is how
// the tests drive it with a fake supervisor. The peer link's ops are
// registered on it by peer_ops.go and tool_ops.go, inside the package:
// the server has no extension points for others.
//
// # Concurrency
//
// Goroutines, each with its owner:
//   - Run's serve: an errgroup of the supervisor (Supervisor.Run), the
//     control server (Serve), and once ready keepStatus and the watchdog;
//     the first that fails ends the others, and Run waits for them all.
//   - Serve: the accept loop (Serve's caller), the forwarder of the
//     supervisor's events (forward), the closer of the listener, and one
//     serveConn per connection; Serve waits for them all.
//   - serveConn: the connection's reader (readLoop, on serveConn's own
//     goroutine), its writer's loop (linewriter.Writer.Run) and one
//     goroutine per request in flight (at most maxInflight; ordered ops
//     run on the reader). serveConn waits for the requests, runs the
//     onClose hooks, closes the writer and waits for its loop.
//
// Locks, and what each guards:
//   - the queue lock of each connection's linewriter.Writer (Conn.w): the
//     connection's queued lines. It is the innermost lock of whoever puts
//     a line, and an answer's Then and Before (answerThen) run under it.
//     One lock nests inside it: app.send's Before puts the frame, checked
//     and its link found before, on the app's hub write queue, whose lock
//     takes no other.
//   - Server.mu: the op registry and the topics.
//   - fanout.mu: the set of streams (subscriptions).
//   - stream.mu: a follow stream's covered (the number of the last log
//     line its answer held).
//   - Conn.subMu: the connection's subscribe stream; Conn.hookMu: its
//     onClose hooks.
//   - peerLink.kmu: the kernel session of each kernel connection;
//   - published.mu: how far each app's state events were published, by
//     the number of the app's move (supervisor.AppStatus.Seq).
//   - instance.reloadMu: one reload at a time.
//
// Lock order: Then runs under a connection's queue lock, and takes (in
// this order) stream.mu, fanout.mu or the supervisor's log ring
// (followThen). So nothing puts a line while holding one of those: the
// fanout's publisher takes the streams of a topic under fanout.mu, lets
// go, then applies each stream's covered under stream.mu, lets go, then
// puts. No Then calls into the peer Manager. The peer Manager calls the
// kernel connection (connKernel) and the fanout (approvals) with an
// app's peer locked: those only put lines. No lock is held across a
// write to a socket (linewriter writes off its lock).
//
// One way keeps events behind the answer that announces them: the answer
// is queued in the step that makes what sends them visible. For what the
// connection owns, that step is the answer's Then (a subscription or a
// follow stream joins the fanout). For what the peer Manager owns, the
// answer is an answerAt, queued by the Manager in its own step:
// kernel.attach's before the kernel is visible (peer.Manager.AttachKernel),
// tool.call's "accepted" with the app's peer locked, between accepting
// the call and placing it (peer.KernelSession.ToolCall). Those answers
// never wait for room: a client whose queue is full is dropped.
package daemon
