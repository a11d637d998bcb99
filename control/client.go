package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"octosup/policy"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrClosed is returned by calls on a connection that ended.
var ErrClosed = errors.New("control connection closed")

// NotRunningError is the dial error when nothing listens at Path: the
// socket does not exist or refuses connections.
type NotRunningError struct {
	Path string
	Err  error // the dial error, e.g. ENOENT or ECONNREFUSED
}

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("octosupd is not running (nothing listens at %s: %v)", e.Path, e.Err)
}

func (e *NotRunningError) Unwrap() error { return e.Err }

// IsDaemonNotRunning reports whether err says the daemon is not running.
func IsDaemonNotRunning(err error) bool {
	var nre *NotRunningError
	return errors.As(err, &nre)
}

// Client talks to octosupd. The zero value uses the default socket
// (policy.DirsFromEnv(os.Getenv).ControlSocket()).
type Client struct {
	Path string // the socket; "" means the default
}

// SocketPath is the socket the client dials.
func (c *Client) SocketPath() string {
	if c.Path != "" {
		return c.Path
	}
	dirs, err := policy.DirsFromEnv(os.Getenv)
	if err != nil {
		// Without HOME the runtime dir still resolves from
		// XDG_RUNTIME_DIR or the per-uid fallback.
		dirs, _ = policy.DirsFromEnv(func(k string) string {
			if k == "HOME" {
				return "/"
			}
			return os.Getenv(k)
		})
	}
	return dirs.ControlSocket()
}

// Connect opens a connection on which many requests may be in flight and
// events arrive.
func (c *Client) Connect(ctx context.Context) (*Conn, error) {
	path := c.SocketPath()
	nc, err := new(net.Dialer).DialContext(ctx, "unix", path)
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		return nil, &NotRunningError{Path: path, Err: err}
	case err != nil:
		return nil, fmt.Errorf("connect to octosupd at %s: %w", path, err)
	}
	return NewConn(nc), nil
}

// Do sends one request on a connection of its own and decodes its
// answer's data into out (unless nil). A refusal is an *Error.
func (c *Client) Do(ctx context.Context, op string, args, out any) error {
	conn, err := c.Stream(ctx, op, args, out)
	if err == nil {
		conn.Close()
	}
	return err
}

// Stream sends a request that starts events (subscribe, logs with
// follow), decodes its answer into out and returns the connection, whose
// Events the caller reads until it closes it.
func (c *Client) Stream(ctx context.Context, op string, args, out any) (*Conn, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := conn.Do(ctx, op, args, out); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Subscribe is Stream for subscribe with the given topics.
func (c *Client) Subscribe(ctx context.Context, topics ...string) (*Conn, error) {
	return c.Stream(ctx, OpSubscribe, SubscribeArgs{Topics: topics}, nil)
}

// eventBuffer is how many events a Conn holds before it stops reading
// (and the daemon drops it as a slow subscriber).
const eventBuffer = 256

// Conn is one control connection. Its reader goroutine lives until the
// connection ends (Close, or the daemon hangs up).
type Conn struct {
	nc     net.Conn
	events chan Event
	done   chan struct{} // closed when the reader returned
	closed chan struct{} // closed by the first fail

	// wmu is held across a whole line's write, so that each write's
	// deadline is its own.
	wmu sync.Mutex

	// pending has each request in flight's channel for its answer's line,
	// which the request's own goroutine decodes.
	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan []byte
	err     error // why the connection ended; set once before closed closes, read freely after
	once    sync.Once
}

// NewConn wraps an established connection and starts its reader.
func NewConn(nc net.Conn) *Conn {
	c := &Conn{
		nc:      nc,
		events:  make(chan Event, eventBuffer),
		done:    make(chan struct{}),
		closed:  make(chan struct{}),
		pending: make(map[int64]chan []byte),
	}
	go c.read()
	return c
}

// Events delivers the connection's events; it is closed when the
// connection ends, and Err says why.
func (c *Conn) Events() <-chan Event { return c.events }

// Err is why the connection ended: ErrClosed after Close, the daemon's
// *Error when it refused the connection, or the read error.
func (c *Conn) Err() error {
	select {
	case <-c.closed:
		return c.err
	default:
		return nil
	}
}

// Close ends the connection.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

func (c *Conn) fail(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.closed)
		c.nc.Close()
	})
}

// Do sends a request and waits for its answer.
func (c *Conn) Do(ctx context.Context, op string, args, out any) error {
	req := Request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("%s: encode args: %w", op, err)
		}
		req.Args = b
	}
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", op, err)
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
	}()

	line, _ := json.Marshal(req) // cannot fail: its args were marshalled above
	if len(line) > MaxLine {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s: the request is %d bytes, over the %d-byte limit of a line", op, len(line), MaxLine)}
	}
	line = append(line, '\n')
	if err := c.write(ctx, line); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			<-ctx.Done() // the write's deadline was ctx's
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The daemon hung up (it may have said why first, e.g.
		// not_permitted): the reader has the reason.
		if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			select {
			case <-c.closed:
				return fmt.Errorf("%s: %w", op, c.err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		c.fail(err)
		return fmt.Errorf("%s: %w", op, err)
	}
	select {
	case line := <-ch:
		return decodeAnswer(op, line, out)
	case <-c.closed:
		return fmt.Errorf("%s: %w", op, c.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes a whole line. A line cut short (ctx's deadline) would
// garble the next request's: the Conn ends there.
func (c *Conn) write(ctx context.Context, line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
		defer c.nc.SetWriteDeadline(time.Time{})
	}
	n, err := c.nc.Write(line)
	if err != nil && n > 0 {
		c.fail(fmt.Errorf("a request's line was cut short after %d of its %d bytes (%w): the connection cannot carry another", n, len(line), err))
	}
	return err
}

func (c *Conn) read() {
	defer close(c.done)
	defer close(c.events)
	r := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		line, err := readLine(r, MaxLine)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = ErrClosed
			}
			c.fail(err)
			return
		}
		id, answer := answerID(line)
		if !answer {
			// One pass: an event's other members are for whoever takes
			// the event.
			var msg struct {
				ID    int64   `json:"id"`
				Error *Error  `json:"error"`
				Event *string `json:"event"`
			}
			if err := jsonv2.Unmarshal(line, &msg, answerOptions); err != nil {
				// An event may have members named like an answer's
				// with other types (an "error" string): only answers
				// must fit. The daemon writes "event" first, so it is
				// read before such a member stops the reading.
				if msg.Event == nil || !errors.As(err, new(*jsonv2.SemanticError)) {
					c.fail(fmt.Errorf("daemon sent a malformed line: %w", err))
					return
				}
			}
			if msg.Event != nil {
				select {
				case c.events <- Event{Name: *msg.Event, Raw: line}:
				case <-c.closed:
					return
				}
				continue
			}
			if msg.ID == 0 {
				// An answer to no request is about the connection
				// (e.g. not_permitted): it ends.
				if msg.Error != nil {
					c.fail(msg.Error)
				} else {
					c.fail(errors.New("daemon sent an answer without an id"))
				}
				return
			}
			id = msg.ID
		}
		c.mu.Lock()
		ch := c.pending[id]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- line: // buffered 1; ids are never reused
			default:
				// Its first answer is unread: a daemon that answers
				// twice is not to be trusted with the next, and the
				// reader must not wait on it.
				c.fail(fmt.Errorf("daemon answered request %d more than once", id))
				return
			}
		}
	}
}

// answerID is the id of an answer line as the daemon writes it, id first
// ({"id":7,...}), so the reader hands the line on unread and the request
// decodes it in one pass (a status of hundreds of apps is most of it).
// false for any other line, which the reader reads whole.
func answerID(line []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(`{"id":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexAny(rest, ",}")
	if end <= 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return id, err == nil && id > 0
}

// decodeAnswer reads op's answer line into out (nil: data not wanted),
// returning the daemon's refusal if any.
func decodeAnswer(op string, line []byte, out any) error {
	var msg struct {
		OK    bool   `json:"ok"`
		Data  any    `json:"data"`
		Error *Error `json:"error"`
	}
	msg.Data = out
	if out == nil {
		msg.Data = new(jsontext.Value)
	}
	if err := jsonv2.Unmarshal(line, &msg, answerOptions); err != nil {
		return fmt.Errorf("%s: decode answer: %w", op, err)
	}
	if !msg.OK {
		if msg.Error == nil {
			return &Error{Code: CodeInternal, Message: "the daemon refused the request without saying why"}
		}
		return msg.Error
	}
	return nil
}

// readLine returns the next line without its newline. A line longer than
// max is an error: the daemon never sends one.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, fmt.Errorf("daemon sent a line over %d bytes", max)
		}
		buf = append(buf, chunk...)
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// answerOptions read the daemon's lines as encoding/json would but for
// case (the daemon writes exact names): json/v2 reads a status of hundreds
// of apps in a fraction of encoding/json's time, which octosupctl and the
// shell pay on every poll.
var answerOptions = jsontext.AllowInvalidUTF8(true)
