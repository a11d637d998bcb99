// Package daemon is octosupd: it loads the manifest, runs the supervisor,
// serves the control socket and talks to systemd (readiness, STATUS=,
// watchdog, socket activation). Run is the whole daemon; cmd/octosupd
// parses flags and cancels Run's context on a signal. NewServer and Serve
// run the control server alone with any Apps (tests: a fake supervisor);
// peer_ops.go and tool_ops.go register the peer link's ops from inside.
//
// # Who may use the control socket
//
// Each connection is checked once, at accept (Server.admit): unless its
// peer has the daemon's uid (SO_PEERCRED) and the supervisor places it
// positively outside every app (Apps.CheckCaller), it is closed, after a
// not_permitted line if its credentials could be read. The peer is held
// by the pidfd of the process that called connect() (SO_PEERPIDFD, Linux
// 6.5); one that has
// exited, or has no pidfd, is refused. Before 6.5 the pidfd is opened on
// the SO_PEERCRED pid, and a process there that started after the accept
// is refused; a pid reused between connect and accept (or within the
// accept's 10 ms clock tick) is still checked in the peer's stead, which
// the daemon logs once.
//
// # Concurrency
//
//  1. Run's errgroup runs the supervisor, Serve (once the manifest's apps
//     are the supervisor's) and, once ready, keepStatus and the watchdog;
//     the first to fail ends the others. Serve runs a listener closer and
//     a serveConn per connection; serveConn reads (readLoop) and runs the
//     writer loop (linewriter.Writer.Run) and a goroutine per request in
//     flight (at most maxInflight; ordered ops run on the reader). Each
//     waits for what it runs, but shutdown's context.AfterFunc close.
//  2. A source publishes an event in the step that makes it, with no
//     goroutine between: a state move under the supervisor's lock, a log
//     line under its app's ring lock, approvals, frames and a kernel's
//     events under the app's peer or relay lock (peer/doc.go, rule 4).
//     Publishing never waits: a connection with no room is dropped there
//     (logged, socket closed) under the publisher's lock.
//  3. An answer that starts something (subscribe, logs with follow,
//     kernel.attach, tool.call, app.send) is an answerAt, queued in the
//     step that makes it visible, by that step's owner, so it precedes
//     the events it announces. It never waits for room (the step may hold
//     an app's lock), but subscribe's (a waitStep, under Conn.subMu only).
//  4. Locks: a connection's linewriter queue lock guards its lines;
//     fanout.mu the streams; Conn.subMu the subscribe stream;
//     instance.reloadMu makes reloads one at a time. A connection's kernel
//     session is an atomic it owns: serveConn detaches it once no handler
//     runs.
//  5. Order: reloadMu is outermost (a reload narrows the links and applies
//     the manifest under it). fanout.mu and queue locks are innermost, one
//     at a time: a publisher lets fanout.mu go before it puts; subscribe
//     queues its answer, then adds its stream. The op registry and topics
//     are filled before Serve and only read after: no lock.
//  6. Only subMu (a subscribe's answer waiting for room, which only that
//     connection's subscribes wait on) and reloadMu are held across a
//     wait. A write under a lock never blocks: a Put on an idle, uncorked
//     connection, or a Hold's last Release, writes what the socket takes
//     at once; the writer loop writes the rest off every lock. Log lines
//     are written under their writer's locks.
package daemon
