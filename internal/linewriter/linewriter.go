package linewriter

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"octosup/internal/trywrite"
)

// ErrClosed is what Put answers once the writer was closed, aborted or
// failed: the line was not queued.
var ErrClosed = errors.New("the connection's writer is closed")

// ErrFull is what a Put with Opt.Soft answers past the soft bound (as a
// *Full): the line was not queued and the writer stays up.
var ErrFull = errors.New("the connection's write queue is full")

// Full is ErrFull with the figures a message needs.
type Full struct {
	Lines, Bytes int // queued and being written
	Next         int // the refused line's bytes
}

func (f *Full) Error() string {
	return fmt.Sprintf("%v: %d lines (%d bytes) queued", ErrFull, f.Lines, f.Bytes)
}

// Is makes errors.Is(err, ErrFull) hold.
func (f *Full) Is(target error) bool { return target == ErrFull }

// Config bounds a Writer. Zero bounds mean none.
type Config struct {
	// WriteTimeout is how long one blocking write of the loop may take
	// before the writer fails (Failure.Timeout).
	WriteTimeout time.Duration
	// MaxLines and MaxBytes are the hard bound: what is queued and being
	// written. A Put past it fails the writer unless it has Opt.Wait.
	MaxLines, MaxBytes int
	// SoftLines and SoftBytes bound Opt.Soft puts (0: the hard bound).
	SoftLines, SoftBytes int
	// OnFail is called once when the writer fails, with no lock held.
	// The queued lines are dropped; the owner closes the connection.
	OnFail func(*Failure)
}

// Failure is why a writer failed.
type Failure struct {
	Err      error // the write's error, or ErrFull for an overflow
	Timeout  bool  // a write blocked for Config.WriteTimeout
	Overflow bool  // a Put went past the hard bound
	// Lines and Bytes are what was queued, Next the line that did not
	// fit (Overflow only).
	Lines, Bytes, Next int
}

func (f *Failure) Error() string {
	switch {
	case f.Overflow:
		return fmt.Sprintf("%d lines (%d bytes) queued, and the next %d bytes pass the bound", f.Lines, f.Bytes, f.Next)
	case f.Timeout:
		return "the peer did not read: " + f.Err.Error()
	}
	return "write failed: " + f.Err.Error()
}

// Opt says how one line is put.
type Opt struct {
	// Now has the caller write the line at once, non-blocking and off the
	// lock, when nothing is queued or being written and no Hold is on.
	// What the socket does not take goes to the loop.
	Now bool
	// Soft refuses the line with a *Full past the soft bound.
	Soft bool
	// Wait, past the hard bound, waits for room until Wait is closed
	// (then ErrClosed) instead of failing the writer.
	Wait <-chan struct{}
}

// writeBatch caps the bytes of one blocking write: the deadline is
// checked (and moved) between them.
const writeBatch = 64 << 10

// Writer is one socket's write queue. Use New.
type Writer struct {
	conn net.Conn
	raw  syscall.RawConn // nil: every line goes through the loop
	cfg  Config
	kick chan struct{} // wakes the loop (capacity 1)

	// mu guards the fields below; it is never held across a write.
	mu     sync.Mutex
	lines  [][]byte // queued, each ending in its newline
	queued int      // bytes in lines
	// out and outLines are what a writer (the loop or a direct writer)
	// took and has not written yet; writing says one holds the socket.
	out, outLines int
	writing       bool
	spare         [][]byte // the slice the last writer gave back
	held          int
	closed        bool          // Close: nothing more is taken; the loop writes the rest
	done          bool          // failed or aborted: nothing more is written
	room          chan struct{} // closed when room is made; nil while nobody waits

	failOnce sync.Once
}

// New returns a Writer for conn. Its owner runs Run.
func New(conn net.Conn, cfg Config) *Writer {
	w := &Writer{conn: conn, cfg: cfg, kick: make(chan struct{}, 1)}
	if sc, ok := conn.(syscall.Conn); ok {
		w.raw, _ = sc.SyscallConn()
	}
	return w
}

// Put queues line; a newline is added when it lacks one (to a copy). It
// never blocks but for room with Opt.Wait. A nil error means queued (or
// written). The writer keeps line until it is written, and never changes
// its bytes: the caller must not change them either (one published line
// may go to many writers).
func (w *Writer) Put(line []byte, o Opt) error {
	line = withNewline(line)
	w.mu.Lock()
	if err := w.admitLocked(len(line), o); err != nil {
		return err // admit unlocked
	}
	idle := len(w.lines) == 0 && !w.writing && w.held == 0
	w.queueLocked(line)
	if o.Now && idle && w.raw != nil {
		return w.flushLocked()
	}
	// Under a Hold the loop starts only on a queue grown past a batch
	// (or a quarter of the line bound).
	kick := w.held == 0 || (w.cfg.MaxLines > 0 && len(w.lines) >= max(1, w.cfg.MaxLines/4)) || w.queued >= writeBatch
	w.mu.Unlock()
	if kick {
		w.wake()
	}
	return nil
}

// withNewline is line ending in a newline; one is added to a copy, so
// that nothing is written into the caller's spare capacity.
func withNewline(line []byte) []byte {
	if len(line) > 0 && line[len(line)-1] == '\n' {
		return line
	}
	return append(line[:len(line):len(line)], '\n')
}

// admitLocked checks the bounds for a line of size bytes, waiting for
// room with o.Wait. It returns with mu held when the line may be queued,
// and with mu released otherwise.
func (w *Writer) admitLocked(size int, o Opt) error {
	for {
		if w.closed || w.done {
			w.mu.Unlock()
			return ErrClosed
		}
		lines, bytes := len(w.lines)+w.outLines, w.queued+w.out
		if sl, sb := w.soft(); o.Soft && over(lines, bytes+size, sl, sb) {
			w.mu.Unlock()
			return &Full{Lines: lines, Bytes: bytes, Next: size}
		}
		if !over(lines, bytes+size, w.cfg.MaxLines, w.cfg.MaxBytes) {
			return nil
		}
		if o.Wait == nil {
			f := &Failure{Err: ErrFull, Overflow: true, Lines: lines, Bytes: bytes, Next: size}
			w.failLocked()
			w.mu.Unlock()
			w.report(f)
			return ErrClosed
		}
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room: // a write made room, or the writer ended
		case <-o.Wait:
			return ErrClosed
		}
		w.mu.Lock()
	}
}

func (w *Writer) soft() (int, int) {
	l, b := w.cfg.SoftLines, w.cfg.SoftBytes
	if l == 0 {
		l = w.cfg.MaxLines
	}
	if b == 0 {
		b = w.cfg.MaxBytes
	}
	return l, b
}

// over says whether lines queued plus one, or bytes, pass a bound (0:
// none). The line count is checked before the line is added: a bound of
// N lines holds N.
func over(lines, bytes, maxLines, maxBytes int) bool {
	return (maxLines > 0 && lines >= maxLines) || (maxBytes > 0 && bytes > maxBytes)
}

func (w *Writer) queueLocked(line []byte) {
	w.lines = append(w.lines, line)
	w.queued += len(line)
}

// takeLocked hands a writer the queue: it holds the socket until
// giveBackLocked.
func (w *Writer) takeLocked() [][]byte {
	batch := w.lines
	w.lines, w.spare = w.spare[:0], nil
	w.out, w.outLines, w.queued, w.writing = w.queued, len(batch), 0, true
	return batch
}

// giveBackLocked ends a writer's hold of the socket. rest is what it did
// not write, in order: it goes back in front of what queued meanwhile.
func (w *Writer) giveBackLocked(batch, rest [][]byte) {
	w.writing = false
	w.out, w.outLines = 0, 0
	if len(rest) > 0 {
		for _, l := range rest {
			w.queued += len(l)
		}
		w.lines = append(rest[:len(rest):len(rest)], w.lines...)
	}
	clear(batch) // not keep written lines alive
	if w.spare == nil {
		w.spare = batch[:0]
	}
}

// flushLocked writes what is queued without blocking, off the lock, and
// hands the loop what the socket did not take. mu is held and no writer
// holds the socket; flushLocked releases mu.
func (w *Writer) flushLocked() error {
	batch := w.takeLocked()
	w.mu.Unlock()

	n, err := trywrite.Write(w.raw, batch)

	w.mu.Lock()
	if err != nil {
		w.writing = false
		w.failLocked()
		w.mu.Unlock()
		w.report(&Failure{Err: err})
		return ErrClosed
	}
	if w.done {
		w.writing = false // the loop has returned, or will
		w.mu.Unlock()
		return nil
	}
	rest := unwritten(batch, n)
	w.giveBackLocked(batch, rest)
	kick := len(w.lines) > 0 || w.closed
	w.wakeRoomLocked()
	w.mu.Unlock()
	if kick {
		w.wake()
	}
	return nil
}

// unwritten is what of batch is left after its first n bytes went: a
// new slice, the first line cut where the write stopped.
func unwritten(batch [][]byte, n int) [][]byte {
	for i, l := range batch {
		if n < len(l) {
			return append([][]byte{l[n:]}, batch[i+1:]...)
		}
		n -= len(l)
	}
	return nil
}

// Hold corks the writer: what is put meanwhile is queued, not written,
// until the last Release (the loop still takes it once it passes a
// batch). It is for batching a burst into one write, not for ordering.
func (w *Writer) Hold() {
	w.mu.Lock()
	w.held++
	w.mu.Unlock()
}

// Release ends a Hold. The last one writes what queued meanwhile, off
// the lock, or hands it to the loop.
func (w *Writer) Release() {
	w.mu.Lock()
	w.held--
	if w.held > 0 || len(w.lines) == 0 || w.done {
		w.mu.Unlock()
		return
	}
	if w.writing || w.raw == nil || w.closed {
		w.mu.Unlock()
		w.wake()
		return
	}
	w.flushLocked()
}

// Queued is what is queued and being written.
func (w *Writer) Queued() (lines, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lines) + w.outLines, w.queued + w.out
}

// Close has the loop write what is queued and return; later Puts are
// ErrClosed.
func (w *Writer) Close() {
	w.mu.Lock()
	w.endLocked()
	w.closed = true
	w.mu.Unlock()
}

// Abort drops what is queued: nothing more is written and Run returns
// (once a blocked write returns: the owner closes the connection).
func (w *Writer) Abort() {
	w.mu.Lock()
	w.failLocked()
	w.mu.Unlock()
}

func (w *Writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default: // the loop is awake already
	}
}

func (w *Writer) wakeRoomLocked() {
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
}

// endLocked tells the loop and whoever waits for room that the writer
// takes nothing more (Close, Abort or a failure). The loop is woken
// every time: after a Close it may be waiting for a direct writer, whose
// failure must end it too.
func (w *Writer) endLocked() {
	w.wakeRoomLocked()
	w.wake()
}

// failLocked ends the writer: what is queued is dropped, nobody waits
// for room. mu is held.
func (w *Writer) failLocked() {
	w.endLocked()
	w.done = true
	w.lines, w.spare, w.queued, w.out, w.outLines = nil, nil, 0, 0, 0
}

func (w *Writer) report(f *Failure) {
	w.failOnce.Do(func() {
		if w.cfg.OnFail != nil {
			w.cfg.OnFail(f)
		}
	})
}

// Run is the write loop: at each wake-up it writes all that is queued,
// one writev per batch under load. It returns after Close once the queue
// is written, after Abort, or when a write fails.
func (w *Writer) Run() {
	// The deadline moves at most every tenth of WriteTimeout, not at
	// every write (moving it is a timer update of its own): every write
	// still has at least nine tenths of it.
	var armedAt time.Time
	for range w.kick {
		for {
			w.mu.Lock()
			if w.done {
				w.mu.Unlock()
				return
			}
			if w.writing || len(w.lines) == 0 {
				// Nothing to take: idle, or a direct writer holds the
				// socket and wakes the loop when it is done.
				end := w.closed && !w.writing
				w.mu.Unlock()
				if end {
					return
				}
				break
			}
			batch := w.takeLocked()
			w.mu.Unlock()
			if !w.writeAll(batch, &armedAt) {
				return
			}
		}
	}
}

// writeAll writes batch, blocking, off the lock, at most writeBatch
// bytes a write (a longer line goes in pieces), and gives the socket
// back. It reports false when the writer failed.
func (w *Writer) writeAll(batch [][]byte, armedAt *time.Time) bool {
	var chunk net.Buffers
	for i := 0; i < len(batch); {
		chunk = chunk[:0]
		size, whole := 0, 0
		for ; i < len(batch) && size < writeBatch; i++ {
			l := batch[i]
			if room := writeBatch - size; len(l) > room && size > 0 {
				break // the next write takes it
			} else if len(l) > room {
				chunk, size = append(chunk, l[:room]), writeBatch
				batch[i] = l[room:] // and the rest in the next write
				break
			}
			chunk, size, whole = append(chunk, l), size+len(l), whole+1
		}
		if t := w.cfg.WriteTimeout; t > 0 {
			if now := time.Now(); now.Sub(*armedAt) >= t/10 {
				w.conn.SetWriteDeadline(now.Add(t))
				*armedAt = now
			}
		}
		_, err := chunk.WriteTo(w.conn)
		w.mu.Lock()
		if err != nil || w.done {
			w.writing = false
			w.failLocked()
			w.mu.Unlock()
			if err != nil {
				w.report(&Failure{Err: err, Timeout: errors.Is(err, os.ErrDeadlineExceeded)})
			}
			return false
		}
		w.out -= size
		w.outLines -= whole
		w.wakeRoomLocked() // a Put waiting for room counts what is being written
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.giveBackLocked(batch, nil)
	w.mu.Unlock()
	return true
}
