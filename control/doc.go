// Package control is the wire format of octosupd's control socket
// (docs/control.md) and the client that octosupctl and the desktop shell
// use to speak it. It imports nothing of the daemon: the server lives in
// package daemon.
//
// The wire: one JSON object a line, at most MaxLine bytes. A Request
// {"id": N, "op": ..., "args": {...}} gets exactly one Response with the
// same id; events {"event": topic, ...} may come in between on a
// connection that asked for them (subscribe, logs with follow, an
// attached kernel). An answer with id null (Response.ID 0) is about the
// connection itself (e.g. not_permitted) or a line that could not be
// attributed. The hello op says which protocol version the daemon speaks
// and which ops and topics it serves.
//
// An error's message says what went wrong and what to do, without the op
// or app the client asked about: the client knows them and says them
// once itself (octosupctl prints "octosupctl: restart nope: the manifest
// has no such app: status lists those it has"). Every op words an unknown
// app the same.
//
// The client:
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
// Do uses a connection per call; Connect gives one connection on which
// many calls may be in flight at once and events arrive.
package control
