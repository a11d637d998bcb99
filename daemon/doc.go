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
//     (supervisor.Supervisor.CheckPeer, through Apps.CheckPeer).
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
// the tests drive it with a fake supervisor.
//
// Extension points for the peer link:
//   - Server.Handle registers more ops (a Handler per op name);
//   - Server.Publish fans an event out to every connection subscribed to
//     its topic (Server.AddTopic makes a new topic subscribable);
//   - Conn.Event sends an event to one connection (the attached kernel),
//     Conn.Done says when it went away; a Handler that returns
//     AfterReply(data, fn) has fn run once its answer is queued, so that
//     the events fn starts follow the answer;
//   - Config.Links, Config.LinkStatus and Config.Setup wire the link into
//     Run.
package daemon
