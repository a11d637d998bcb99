// Package linewriter is the one write queue of octosup's line-framed
// sockets: an app's hub (package peer) and a control connection (package
// daemon) each have one Writer.
//
// A Writer is a mutex, a slice of the lines waiting for its socket
// (bounded in lines and bytes; a line is kept as it was put, not
// copied), a kick channel and the one goroutine that blocks on the
// socket (Run). It writes the lines in the order their Put took the
// queue lock, each burst in one writev(2) (net.Buffers):
//
//	w := linewriter.New(conn, linewriter.Config{WriteTimeout: 10 * time.Second,
//		MaxLines: 1024, MaxBytes: 8 << 20, OnFail: func(f *linewriter.Failure) { conn.Close() }})
//	go w.Run()                         // its owner runs the loop
//	err := w.Put(line, linewriter.Opt{Now: true})
//	...
//	w.Close()                          // what is queued is written, then Run returns
//
// Two things it does that a bufio.Writer behind a mutex would not:
//
//   - No lock is held across a write. A line put with Opt.Now while the
//     socket is idle is written by its caller at once, non-blocking and
//     off the lock (one wake-up of the loop saved per quiet round trip;
//     what a Release finds queued goes the same way);
//     what the socket does not take goes to the loop, which is the only
//     one that blocks on the socket, bounded by Config.WriteTimeout.
//   - Bounds that say who is at fault: a Put over the hard bound fails the
//     writer (the peer does not read) unless it waits for room
//     (Opt.Wait); a Put with Opt.Soft is refused ErrFull past the soft
//     bound and the connection stays up (outside traffic may not take the
//     room the daemon's own answers need).
//
// Lock order: the queue lock is the innermost lock of whoever calls Put:
// nothing is called under it.
package linewriter
