package daemon

import (
	"bufio"
	"bytes"
	"context"
	"sync"

	"octosup/control"
)

// readLoop reads requests until EOF or error. Each runs in a goroutine
// of its own, so a slow op (a stop's grace) holds up no other; an ordered
// op (handleOrdered) runs here, in the order sent.
func (c *Conn) readLoop(ctx context.Context, inflight *sync.WaitGroup) {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	slots := make(chan struct{}, maxInflight)
	// Corked (Hold) while another whole request waits in r: a burst's
	// lines leave in one write, not one write (and client wake-up)
	// each. Never corked while the reader may block. Batching only:
	// lines keep their queued order.
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
		// more: a whole line waits in r (a Peek of what is buffered never reads).
		buffered, _ := r.Peek(r.Buffered())
		more := err == nil && bytes.IndexByte(buffered, '\n') >= 0
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
			} else if h := c.srv.ops[req.Op]; c.srv.ordered[req.Op] {
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
				r := req // captured, req itself would escape for every request
				inflight.Go(func() {
					defer func() { <-slots }()
					c.dispatch(ctx, r, h)
				})
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
