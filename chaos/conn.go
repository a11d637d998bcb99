package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"octosup/control"
)

// conn is a control connection read by one goroutine that handles every
// line in the order the daemon wrote it: an answer's hook and an event's
// handler run on that goroutine, so what the ledger records of a call is
// in wire order (control.Conn hands answers and events to two channels,
// which loses that order).
type conn struct {
	id int // names the connection in call histories
	nc *net.UnixConn

	onEvent func(c *conn, name string, line []byte)

	wmu sync.Mutex

	mu      sync.Mutex
	next    int64
	pending map[int64]pending
	err     error
	done    chan struct{} // closed when the reader returned
}

type pending struct {
	ch   chan control.Response
	hook func(control.Response) // runs on the reader, before later lines
}

// errConnEnded is wrapped by the error of a request whose connection
// ended before its answer.
var errConnEnded = errors.New("control connection ended")

func dialConn(ctx context.Context, path string, id int, onEvent func(*conn, string, []byte)) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to octosupd at %s: %w", path, err)
	}
	c := &conn{id: id, nc: nc.(*net.UnixConn), onEvent: onEvent, pending: map[int64]pending{}, done: make(chan struct{})}
	go c.read()
	return c, nil
}

// wireLine is what the reader decodes of every line: an answer's members
// and those of the events the chaos run looks at.
type wireLine struct {
	ID    int64           `json:"id"`
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error json.RawMessage `json:"error"`
	Event *string         `json:"event"`
}

func (c *conn) read() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if err != nil {
			break
		}
		var w wireLine
		if err = json.Unmarshal(line, &w); err != nil {
			err = fmt.Errorf("the daemon sent a line that is not JSON: %w: %q", err, line)
			break
		}
		if w.Event != nil {
			if c.onEvent != nil {
				c.onEvent(c, *w.Event, line)
			}
			continue
		}
		resp := control.Response{ID: w.ID, OK: w.OK, Data: w.Data}
		if len(w.Error) > 0 && string(w.Error) != "null" {
			var e control.Error
			if json.Unmarshal(w.Error, &e) == nil {
				resp.Error = &e
			}
		}
		c.mu.Lock()
		p, ok := c.pending[w.ID]
		delete(c.pending, w.ID)
		c.mu.Unlock()
		if !ok {
			if w.ID == 0 && resp.Error != nil {
				err = resp.Error
				break
			}
			continue
		}
		if p.hook != nil {
			p.hook(resp)
		}
		p.ch <- resp
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = errConnEnded
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	c.nc.Close()
}

// do sends op and waits for its answer. hook, when set, runs on the
// reader goroutine with the answer before any later line is handled.
func (c *conn) do(ctx context.Context, op string, args, out any, hook func(control.Response)) error {
	req := control.Request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("%s: encode args: %w", op, err)
		}
		req.Args = b
	}
	ch := make(chan control.Response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", op, err)
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = pending{ch: ch, hook: hook}
	c.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err = c.nc.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.nc.Close()
		<-c.done
		return fmt.Errorf("%s: %w: %v", op, errConnEnded, err)
	}
	select {
	case resp := <-ch:
		if !resp.OK {
			if resp.Error == nil {
				return fmt.Errorf("%s: refused without an error", op)
			}
			return resp.Error
		}
		if out != nil && len(resp.Data) > 0 {
			if err := json.Unmarshal(resp.Data, out); err != nil {
				return fmt.Errorf("%s: decode answer: %w", op, err)
			}
		}
		return nil
	case <-c.done:
		// The answer may have been handled just before the end.
		select {
		case resp := <-ch:
			if !resp.OK && resp.Error != nil {
				return resp.Error
			}
			if resp.OK {
				if out != nil && len(resp.Data) > 0 {
					json.Unmarshal(resp.Data, out)
				}
				return nil
			}
		default:
		}
		return fmt.Errorf("%s: %w (%v)", op, errConnEnded, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
}

// Err is why the connection ended, nil while it runs.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// hangUp ends the connection the way a kernel that detaches cleanly
// does: it stops writing (the daemon reads end-of-file, detaches the
// kernel and flushes what it had queued) and reads until the daemon
// closes its end, so that no event already written is lost. After
// timeout it closes the connection outright.
func (c *conn) hangUp(timeout time.Duration) error {
	if err := c.nc.CloseWrite(); err != nil {
		c.nc.Close()
		<-c.done
		return fmt.Errorf("half-close: %w", err)
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(timeout):
		c.nc.Close()
		<-c.done
		return fmt.Errorf("the daemon did not close the connection within %v of our end-of-file", timeout)
	}
}

// close ends the connection at once.
func (c *conn) close() {
	c.nc.Close()
	<-c.done
}
