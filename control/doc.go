// Package control is the wire format of octosupd's control socket
// (docs/control.md) and the client octosupctl and the desktop shell use
// to speak it. The server is package daemon; this package imports none
// of it.
//
// One JSON object a line, at most MaxLine bytes. A Request {"id": N,
// "op": ..., "args": {...}} gets exactly one Response with its id; events
// {"event": topic, ...} may come between on a connection that asked for
// them (subscribe, logs with follow, an attached kernel). An answer with
// id null (Response.ID 0) is about the connection (e.g. not_permitted)
// or a line that could not be attributed. The hello op names the
// protocol version and the ops and topics served.
//
// An error's message says what went wrong and what to do, not the op or
// app asked about: the client knows those and says them once. Every op
// words an unknown app the same.
//
//	var c control.Client // the default socket; or Client{Path: ...}
//	var st control.StatusData
//	err := c.Do(ctx, control.OpStatus, control.StatusArgs{}, &st)
//	switch {
//	case control.IsDaemonNotRunning(err): // nothing listens: tell the person to start it
//	case err != nil: // a *control.Error has the daemon's Code; anything else is transport
//	}
//	conn, err := c.Subscribe(ctx, control.TopicState)
//	for ev := range conn.Events() { ... } // closed when the connection ends; conn.Err() says why
//
// Do uses a connection per call; Connect gives one connection with many
// calls in flight and events.
package control
