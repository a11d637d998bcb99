// Package pulsefilter stands between a jailed app and its PulseAudio
// server (PulseAudio's own, or pipewire-pulse) and passes on only what
// playing and recording sound needs.
//
// A sound server trusts a client of its own user: any of them may load a
// module, and a module is code the server runs (module-ladspa-sink
// dlopens the plugin path it is given, module-pipe-sink writes the file
// it is given). A jailed app whose connect the daemon makes would be
// such a client. The filter reads the app's half of the native protocol
// frame by frame: a packet whose command is not on the allow-list ends
// the connection; every property list in a packet keeps only the keys
// PulseAudio defines for a client to describe itself, its streams and
// events (a stream's filter.apply has module-filter-apply load a module,
// and pipewire-pulse copies a stream's properties into its PipeWire
// node's); and the app's AUTH is rewritten to offer no shared memory, so
// that every later packet comes through this stream (with shared memory
// the server moves packets to a ring it shares with the client, where no
// filter sees them). The server's half is copied as it is, the head of
// each of its packets read on the way: a Ledger, one an app, keeps what
// the app holds in the server within bounds across its connections
// (MaxStreams streams at once, placed by the server's answers to the
// creates; MaxCache bytes of samples, each costing at least 64 KiB,
// cached as the server acknowledges their finish and forgotten as it
// acknowledges their removal, by the name it caches them under;
// MaxPlays plays started in a PlayWindow, a play past it waiting for
// room). The client's own properties never name a sample. A connection
// has at most MaxUnanswered commands waiting for the server's answers,
// counted by tag against the REPLY and ERROR packets the server sends:
// past it the filter reads nothing more of the app until an answer
// comes, so that an app that does not read its answers has the server
// queue a few dozen of them, not without end.
//
// Use: the guard (jail/guard_sound.go) dials the server, hands the app a
// connection of its own, and calls Run with both and the app's Ledger
// (kept across the app's restarts) for as long as the app lives.
//
// Concurrency: Run copies the server's half on a goroutine of its own and
// filters the app's half on the caller's; each half is the only writer
// of its connection. Both follow the connection's streams, under that
// state's mutex, which takes the Ledger's (shared by the app's
// connections) inside it, and its unanswered commands, under a mutex of
// their own; no lock is held across I/O, nor while a play waits for room
// (a timer) or a command for an answer (a channel the server's half
// signals on each answer). Either wait also ends with ctx, or with the
// server's half. Either half's end, a refusal or ctx's end closes both
// connections, which ends the other half, and Run returns only once
// that goroutine has ended and the connection's streams are given back
// to the Ledger.
package pulsefilter
