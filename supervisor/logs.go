package supervisor

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxLineBytes caps one line of an app's output; the rest of a longer line
// is dropped (the kept part ends in truncatedMark) so that an app writing
// without newlines cannot grow the daemon's memory.
const maxLineBytes = 4096

const truncatedMark = " …[truncated]"

// LogLine is one line an app wrote to its stdout or stderr. Seq numbers
// the lines of every app from 1, rising in the order each app's ring holds
// them, which is the order they are published in: a follower of an app
// that has its line n has every line of it before n, whatever the clock
// did to At. (One count for every app, so that an app removed and added
// again does not count from 1 again.)
type LogLine struct {
	App    string    `json:"app"`
	Stream string    `json:"stream"` // "stdout" or "stderr"
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
	Seq    uint64    `json:"seq"`
}

// ring keeps an app's last lines. It outlives the app's processes, so that
// the output of a crashed process is still there to read.
type ring struct {
	mu    sync.Mutex
	lines []LogLine // circular once full
	next  int       // where the next line goes once full
	cap   int
}

func newRing(capacity int) *ring { return &ring{cap: capacity} }

// add numbers l from seq, stamps it with now and keeps it, then hands it to
// publish, all under the ring's lock: the two readers of an app (stdout,
// stderr) publish in the ring's order, with times that follow it unless
// the clock steps back. publish must not block.
func (r *ring) add(l LogLine, seq *atomic.Uint64, now func() time.Time, publish func(LogLine)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.Seq, l.At = seq.Add(1), now()
	r.keep(l)
	publish(l)
}

func (r *ring) keep(l LogLine) {
	if len(r.lines) < r.cap {
		r.lines = append(r.lines, l)
		return
	}
	r.lines[r.next] = l
	r.next = (r.next + 1) % r.cap
}

// last returns up to n of the newest lines, oldest first; n <= 0 means all.
func (r *ring) last(n int) []LogLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastLocked(n)
}

// follow calls join with last(n) under the ring's lock: the lines added
// after are the ones published after join returned.
func (r *ring) follow(n int, join func([]LogLine)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	join(r.lastLocked(n))
}

func (r *ring) lastLocked(n int) []LogLine {
	total := len(r.lines)
	if n <= 0 || n > total {
		n = total
	}
	out := make([]LogLine, 0, n)
	start := r.next + total - n // index of the oldest line wanted, unwrapped
	for i := range n {
		out = append(out, r.lines[(start+i)%total])
	}
	return out
}

// readLines reads one stream of an app until EOF or an error (the
// supervisor sets a past read deadline to end it), calls emit with each
// line, capped at maxLineBytes, and closes f.
func readLines(f io.ReadCloser, emit func(text string)) {
	defer f.Close()
	br := bufio.NewReaderSize(f, maxLineBytes)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			emit(clean(line) + truncatedMark)
			// Drop the rest of the line without keeping it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return
			}
			continue
		}
		if len(line) > 0 {
			emit(clean(line))
		}
		if err != nil {
			return
		}
	}
}

// clean turns raw bytes into a line fit for JSON: no line ending, valid
// UTF-8. It is not fit for a terminal as it is: the line keeps the app's
// control characters, which a client shows with control.Visible.
func clean(b []byte) string {
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
