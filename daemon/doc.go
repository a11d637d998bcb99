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
//     control server (Serve, started once the manifest's apps are the
//     supervisor's), and once ready keepStatus and the watchdog;
//     the first that fails ends the others, and Run waits for them all.
//   - Serve: the accept loop (Serve's caller), the closer of the
//     listener, and one serveConn per connection; Serve waits for them
//     all.
//   - serveConn: the connection's reader (readLoop, on serveConn's own
//     goroutine), its writer's loop (linewriter.Writer.Run) and one
//     goroutine per request in flight (at most maxInflight; ordered ops
//     run on the reader). serveConn waits for the requests, runs the
//     onClose hooks, closes the writer and waits for its loop. The
//     server's shutdown closes each connection's socket from a
//     context.AfterFunc goroutine, which nothing waits for (it only
//     closes).
//
// No goroutine stands between a source of events and the connections:
// the supervisor hands each event to supervisorEvent in the step that
// makes it (a move under its lock, before the op that moved the app
// hears of it; a log line under its app's ring lock), the peer Manager
// its approvals and app frames with the app's peer locked, and a
// kernel's events with its peer or relay locked (peer/doc.go, rule 6);
// each is put on every subscribed connection's queue (a kernel's, on the
// kernel's connection) at once, never waiting for room: a connection with
// no room is dropped there and then, which logs a line and closes its
// socket under the publisher's lock.
//
// One way keeps events behind the answer that announces them: a handler
// whose answer starts something (a subscription, logs with follow,
// kernel.attach, tool.call, app.send) returns an answerAt, and its answer
// is queued in the step that makes that visible, by whoever owns it: the
// connection's subscribe stream (under Conn.subMu) for a subscription,
// the app's log ring for a follow (supervisor.Supervisor.FollowLogs: the
// answer holds the lines before, the stream gets every line after), the
// peer Manager for a kernel, a call or a frame. Such an answer never
// waits for room, as its step may hold an app's lock; but subscribe's
// (a waitStep), whose step holds only Conn.subMu, which only another
// subscribe on the same connection takes (and then waits too).
//
// Locks, and what each guards:
//   - the queue lock of each connection's linewriter.Writer (Conn.w): the
//     connection's queued lines. It is the innermost lock of whoever puts
//     a line.
//   - Server.mu: the op registry and the topics.
//   - fanout.mu: the set of streams (subscriptions); a publisher takes
//     the streams of a topic under it, lets go, then puts.
//   - Conn.subMu: the connection's subscribe stream; Conn.hookMu: its
//     onClose hooks. (Conn.kernel, the kernel session of a connection
//     that attached, is an atomic pointer.)
//   - instance.reloadMu: one reload at a time.
//
// Lock order: fanout.mu and a connection's queue lock come under
// whatever lock a step holds (the supervisor's, an app's ring lock, the
// peer Manager's or an app's peer lock, relay.mu, Conn.subMu), one at a
// time: a publisher takes the streams under fanout.mu and lets go
// before it puts, and subscribe's step queues its answer, then adds its
// stream. instance.reloadMu is outside them all (a reload narrows the
// links and applies the manifest under it); Server.mu and Conn.hookMu
// are taken alone. The queue locks, fanout.mu, Server.mu and hookMu are
// never held across a wait: a queue lock is let go
// before any write; a line put on an idle connection that is not corked
// (linewriter.Writer.Hold) is written by its putter, and what a Hold
// queued by its last Release, with a write that does not wait (under
// whatever locks the putter holds); the rest by the connection's writer
// loop, off every lock. Two locks are held across a wait on purpose:
// Conn.subMu while subscribe's answer waits for room (that connection's
// subscribes alone wait on it), and reloadMu for a whole reload (one at
// a time). Log lines are written under whatever lock their writer holds.
package daemon
