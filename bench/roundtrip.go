package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The tool-call and request sections share this: the tool app under a
// real daemon with a context open, a kernel attached on the control
// socket with raw lines, the JSON echo that is their floor, and the loop
// that keeps up to K round trips in flight.

// roundTrips is what a pipeline drives: send(i) writes round trip i (one
// write), recv blocks until one completes and says which.
type roundTrips interface {
	send(i int) error
	recv() (int, error)
}

// pipelined runs n round trips with at most inflight outstanding and
// returns each one's time (send → its completion) and the whole run's.
// One goroutine sends and receives: a completion makes room for the next
// send, as a kernel with a fixed window would.
func pipelined(n, inflight int, rt roundTrips) (lat []time.Duration, elapsed time.Duration, err error) {
	if n < 1 || inflight < 1 {
		return nil, 0, fmt.Errorf("%d round trips with %d in flight: both must be at least 1", n, inflight)
	}
	started := make([]time.Time, n)
	lat = make([]time.Duration, n)
	sent := 0
	send := func() error {
		started[sent] = time.Now()
		if err := rt.send(sent); err != nil {
			return fmt.Errorf("send %d: %w", sent, err)
		}
		sent++
		return nil
	}
	t0 := time.Now()
	for sent < min(n, inflight) {
		if err := send(); err != nil {
			return nil, 0, err
		}
	}
	for done := 0; done < n; done++ {
		i, err := rt.recv()
		at := time.Now()
		if err != nil {
			return nil, 0, fmt.Errorf("after %d of %d completions: %w", done, n, err)
		}
		if i < 0 || i >= sent || lat[i] != 0 {
			return nil, 0, fmt.Errorf("a completion of round trip %d, never sent or already complete", i)
		}
		lat[i] = max(1, at.Sub(started[i]))
		if sent < n {
			if err := send(); err != nil {
				return nil, 0, err
			}
		}
	}
	return lat, time.Since(t0), nil
}

// lineConn is a stream of JSON lines the bench writes and reads.
type lineConn struct {
	nc  net.Conn
	r   *bufio.Reader
	out []byte
}

func newLineConn(nc net.Conn) *lineConn {
	return &lineConn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
}

// writeOut writes c.out, one write(2).
func (c *lineConn) writeOut() error {
	_, err := c.nc.Write(c.out)
	return err
}

// readLine is the next line, valid until the next read.
func (c *lineConn) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("a line over %d bytes", c.r.Size())
	}
	return line, err
}

// The lines of both paths. A call's and a request's ids are "b<N>" and
// the pipeline's i is N - base, so that ids never repeat within a daemon
// (a repeated call id is refused).

// toolCallLine is the kernel's tool.call line of call N.
func toolCallLine(buf []byte, n int, contextID string) []byte {
	buf = append(buf[:0], `{"id":`...)
	buf = strconv.AppendInt(buf, int64(n)+1000, 10)
	buf = append(buf, `,"op":"tool.call","args":{"app":"`+toolAppID+`","call":{"call_id":"b`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, `","name":"`+toolName+`","args":{"query":"milk"},"risk":"read","confirm":"none","timeout_ms":60000,"context_id":`...)
	buf = strconv.AppendQuote(buf, contextID) // an id: printable ASCII, so JSON as quoted
	return append(buf, `,"caller":"bench"}}}`+"\n"...)
}

// requestLine is the app's request N, the floor's stand-in for what
// bench/toolapp writes.
func requestLine(buf []byte, n int, contextID string) []byte {
	buf = append(buf[:0], `{"octos_peer":{"type":"request","req_id":"b`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, `","method":"octos.turn.interrupt","args":{"context_id":`...)
	buf = strconv.AppendQuote(buf, contextID)
	return append(buf, `,"turn_id":"t"}}}`+"\n"...)
}

// seq parses "b<N>" into N - base.
func seq(id string, base int) (int, error) {
	if len(id) < 2 || id[0] != 'b' {
		return 0, fmt.Errorf("id %q is not one of the bench's", id)
	}
	n, err := strconv.Atoi(id[1:])
	if err != nil {
		return 0, fmt.Errorf("id %q is not one of the bench's", id)
	}
	return n - base, nil
}

// echoProc is bench/jsonecho with a socketpair as its fd 3; or, as a
// relay, "jsonecho relay" with the bench's socketpair as its fd 3 and a
// second jsonecho behind its fd 4.
type echoProc struct {
	*lineConn
	cmds []*exec.Cmd
}

func startEcho(path string, relay bool, logw *os.File) (_ *echoProc, err error) {
	e := &echoProc{}
	var open []*os.File // the ends the bench closes once the children have them
	defer func() {
		for _, f := range open {
			f.Close()
		}
		if err != nil {
			for _, cmd := range e.cmds {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
	}()
	pair := func() (mine, theirs *os.File, err error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
		mine, theirs = os.NewFile(uintptr(fds[0]), "bench"), os.NewFile(uintptr(fds[1]), "echo")
		open = append(open, mine, theirs)
		return mine, theirs, nil
	}
	start := func(args []string, files ...*os.File) error {
		cmd := exec.Command(path, args...)
		cmd.ExtraFiles = files
		cmd.Stdout, cmd.Stderr = logw, logw
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", path, err)
		}
		e.cmds = append(e.cmds, cmd)
		return nil
	}
	mine, theirs, err := pair()
	if err != nil {
		return nil, err
	}
	if !relay {
		err = start(nil, theirs)
	} else {
		var toEcho, echoEnd *os.File
		if toEcho, echoEnd, err = pair(); err != nil {
			return nil, err
		}
		if err = start(nil, echoEnd); err == nil {
			err = start([]string{"relay"}, theirs, toEcho)
		}
	}
	if err != nil {
		return nil, err
	}
	nc, err := net.FileConn(mine) // a dup on the netpoller, as the control socket's client is
	if err != nil {
		return nil, fmt.Errorf("the echo's socket: %w", err)
	}
	e.lineConn = newLineConn(nc)
	return e, nil
}

// Close ends the echo: end-of-file on its fd 3 (a relay passes it on to
// its echo), then their exits.
func (e *echoProc) Close() error {
	e.nc.Close()
	var errs []error
	for _, cmd := range e.cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cmd.Args, err))
		}
	}
	return errors.Join(errs...)
}

// echoTrips sends line(N) to the echo and reads it back, decoding the
// echoed line as the kernel decodes a tool.finished event (or the app a
// reply): the same work on the bench's side as on the real path.
type echoTrips struct {
	e    *echoProc
	base int
	line func(buf []byte, n int) []byte
	id   func(line []byte) (string, error)
}

func (t *echoTrips) send(i int) error {
	t.e.out = t.line(t.e.out, t.base+i)
	return t.e.writeOut()
}

func (t *echoTrips) recv() (int, error) {
	line, err := t.e.readLine()
	if err != nil {
		return 0, fmt.Errorf("the echo: %w", err)
	}
	id, err := t.id(line)
	if err != nil {
		return 0, err
	}
	return seq(id, t.base)
}

func toolCallID(line []byte) (string, error) {
	var v struct {
		Args struct {
			Call struct {
				CallID string `json:"call_id"`
			} `json:"call"`
		} `json:"args"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return "", fmt.Errorf("echoed %.100q: %w", line, err)
	}
	return v.Args.Call.CallID, nil
}

func requestID(line []byte) (string, error) {
	var v struct {
		Peer struct {
			ReqID string `json:"req_id"`
		} `json:"octos_peer"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return "", fmt.Errorf("echoed %.100q: %w", line, err)
	}
	return v.Peer.ReqID, nil
}

// cpuTime is the CPU time (user + system, every thread, living or
// exited) of process pid so far, from /proc/PID/stat: in clock ticks of
// 10 ms (USER_HZ is 100 on Linux), so it is read around runs long enough
// for that.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU takes utime and stime, fields 14 and 15 of a
// /proc/PID/stat line, counted after the command's closing parenthesis
// (the command may hold spaces and parentheses).
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %.60q: no command", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat %.60q: %d fields after the command", b, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		// 1e11 ticks is 31 years of CPU: more is no CPU time (and would
		// overflow a Duration).
		if err != nil || n < 0 || n > 1e11 {
			return 0, fmt.Errorf("/proc stat: utime or stime %q", s)
		}
		ticks += n
	}
	const userHZ = 100
	return time.Duration(ticks) * (time.Second / userHZ), nil
}
