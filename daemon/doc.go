// Package daemon is octosupd: it loads the manifest, starts the
// supervisor, serves the control socket (SPEC §4) and talks to systemd
// (readiness, status, watchdog, socket activation).
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
