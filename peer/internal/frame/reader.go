package frame

import (
	"bytes"
	"io"
)

// The read buffer starts at minChunk and doubles, up to readChunk, each
// time a read fills it; back to minChunk once a read takes less than a
// quarter. An idle hub (most, most of the time) blocks in a read holding
// its buffer: 4 KiB, not 64 (500 idle apps held 29 MiB).
const (
	minChunk  = 4 << 10
	readChunk = 64 << 10
)

// Reader splits a byte stream into lines of at most max bytes (newline
// excluded) and holds at most max bytes of a line plus its read buffer: a
// longer line fails as soon as it passes the cap (ErrFrameTooLong) and is
// skipped to its newline, so an app that never ends a line costs the
// daemon no memory.
type Reader struct {
	r          io.Reader
	max        int
	buf        []byte
	start, end int
	line       []byte
	skipping   bool
	err        error
	next       int // the size of the next read's buffer
}

// NewReader reads lines of at most max bytes from r.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: r, max: max, buf: make([]byte, minChunk), next: minChunk}
}

// Next returns the next line without its newline, valid until the next
// call. After ErrFrameTooLong the next call resumes after that line. An
// unterminated last line is dropped: frames end with a newline. Read
// errors come once the buffered lines are used up (io.EOF at the end).
func (r *Reader) Next() ([]byte, error) {
	if cap(r.line) > readChunk {
		r.line = nil // don't keep a big line's buffer for small ones
	}
	r.line = r.line[:0]
	for {
		if r.start == r.end {
			if r.err != nil {
				return nil, r.err
			}
			if r.next != len(r.buf) {
				r.buf = make([]byte, r.next)
			}
			// Errors are sticky: the link ends on the first one anyway.
			n, err := r.r.Read(r.buf)
			r.start, r.end, r.err = 0, n, err
			switch c := len(r.buf); {
			case n == c && c < readChunk:
				r.next = 2 * c
			case n < c/4 && c > minChunk:
				r.next = minChunk
			}
			continue
		}
		part := r.buf[r.start:r.end]
		i := bytes.IndexByte(part, '\n')
		if i >= 0 {
			part = part[:i]
			r.start += i + 1
		} else {
			r.start = r.end
		}
		switch {
		case r.skipping:
			r.skipping = i < 0
		case len(r.line)+len(part) > r.max:
			r.skipping = i < 0
			return nil, ErrFrameTooLong
		case i >= 0 && len(r.line) == 0:
			return part, nil // the whole line is in the read buffer: no copy
		default:
			if need := len(r.line) + len(part); need > cap(r.line) {
				// Never past the cap: a line at the cap costs exactly the cap.
				r.line = append(make([]byte, 0, min(max(2*cap(r.line), need), r.max)), r.line...)
			}
			r.line = append(r.line, part...)
			if i >= 0 {
				return r.line, nil
			}
		}
	}
}
