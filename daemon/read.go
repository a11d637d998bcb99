package daemon

import (
	"bufio"
	"bytes"
	"context"
	"sync"

	"octosup/control"
)

// readLoop reads requests until EOF or error. Each request runs in its
// own goroutine so that a slow op (stop waits for the grace period) does
// not hold the connection's other requests; an ordered op (handleOrdered)
// runs here, so that a connection's ordered ops take effect in the order
// they were sent.
func (c *Conn) readLoop(ctx context.Context, inflight *sync.WaitGroup) {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	slots := make(chan struct{}, maxInflight)
	// While another whole request waits in r, what the handling of this
	// one sends is corked (linewriter's Hold): the lines of a burst of
	// requests go out in one write once the last is handled, not in one
	// write each (and one wake-up of the client each). Nothing is corked
	// while the reader may block. This is batching only: the order of
	// lines is the order they were queued in, corked or not.
	corked := false
	uncork := func() {
		if corked {
			corked = false
			c.w.Release()
		}
	}
	defer uncork()
	for {
		line, tooLong, err := readRequestLine(r, control.MaxLine)
		more := err == nil && lineBuffered(r)
		if more && !corked {
			c.w.Hold()
			corked = true
		}
		if tooLong {
			c.reply(control.Response{Error: control.Errorf(control.CodeBadRequest, "request line over %d bytes: skipped", control.MaxLine)})
		} else if len(line) > 0 {
			req, derr := control.DecodeRequest(line)
			if derr != nil {
				c.reply(control.Response{ID: req.ID, Error: control.Errorf(control.CodeBadRequest, "%v", derr)})
			} else if h, ordered := c.srv.lookup(req.Op); ordered {
				c.dispatch(ctx, req, h)
			} else {
				select {
				case slots <- struct{}{}:
				default:
					uncork() // the wait may be long (a stop's grace)
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
				inflight.Add(1)
				// The goroutine's own copy: a Request is too large to be
				// captured by value, and req would move to the heap for
				// every request, ordered ones too.
				r := req
				go func() {
					defer inflight.Done()
					defer func() { <-slots }()
					c.dispatch(ctx, r, h)
				}()
			}
		}
		if !more {
			uncork()
		}
		if err != nil {
			return
		}
	}
}

// lineBuffered reports whether r holds a whole line not yet read.
func lineBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}
