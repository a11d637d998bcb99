package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/policy"
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

// The tool app in the daemon's manifest.
const (
	toolAppID = "tools"
	toolName  = "bench.echo"
)

func toolApp(path string, sb policy.Sandbox) policy.App {
	return policy.App{
		ID:      toolAppID,
		Exec:    []string{path},
		Restart: policy.RestartOnRequest,
		Grants: policy.Grants{
			Services: []string{policy.ServiceAgent},
			Methods:  []string{policy.MethodSessionOpen, policy.MethodTurnInterrupt},
			Tools:    []string{toolName},
		},
		Sandbox: sb,
	}
}

// toolAccount is the account of the tool app's context: a tool call is
// declined unless its context's account is in sandbox.accounts.
const toolAccount = "bench"

// toolSandbox is the sandbox the tool app runs in (--tool-sandbox).
func toolSandbox(name string) (sb policy.Sandbox, err error) {
	switch name {
	case "jail":
		sb = jailSandbox(false)
	case "broad":
		sb = broadSandbox()
	default:
		return sb, fmt.Errorf(`--tool-sandbox %q: "jail" or "broad"`, name)
	}
	sb.Accounts = []string{toolAccount}
	return sb, nil
}

// appRig is the tool app running under a daemon, with its session open:
// ops on conn, approval and app.frame events on sub, and the raw kernel
// connection.
type appRig struct {
	client    control.Client
	logs      func(ctx context.Context) string // the app's status and last lines, for an error
	stop      func()                           // ends the daemon, if the rig started it
	conn, sub *control.Conn
	kernel    *lineConn
	contextID string
	timeout   time.Duration
	// daemonPid (0 when the daemon runs in this process) and appPid are
	// for their CPU times.
	daemonPid, appPid int
}

// startAppRig starts a daemon with the tool app and opens a rig on it.
func (e *Env) startAppRig(ctx context.Context, name string, sb policy.Sandbox) (*appRig, error) {
	app, err := e.program(e.ToolApp, "toolapp")
	if err != nil {
		return nil, err
	}
	d, err := e.startDaemon(ctx, name, []policy.App{toolApp(app, sb)})
	if err != nil {
		return nil, err
	}
	logs := func(ctx context.Context) string { return d.appLogs(ctx, toolAppID) }
	r, err := openAppRig(ctx, d.Client, e.Timeout, logs, func() { _ = d.Stop(30 * time.Second) })
	if err != nil {
		return nil, err
	}
	r.daemonPid = d.Pid()
	return r, nil
}

// openAppRig starts the tool app of a running daemon, allows its
// first-use consent as a person would (approve), waits for its context
// and attaches the kernel. stop (called by Close, and here on an error)
// ends the daemon.
func openAppRig(ctx context.Context, client control.Client, timeout time.Duration, logs func(context.Context) string, stop func()) (_ *appRig, err error) {
	r := &appRig{client: client, logs: logs, stop: stop, timeout: timeout}
	// Bounds the ops below; the connections outlive it.
	ctx, cancel := context.WithTimeout(ctx, 3*timeout)
	defer cancel()
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.sub, err = client.Subscribe(ctx, control.TopicApproval, control.TopicAppFrame); err != nil {
		return nil, err
	}
	if r.conn, err = client.Connect(ctx); err != nil {
		return nil, err
	}
	var st control.StateData
	if err := r.conn.Do(ctx, control.OpStart, control.AppArgs{App: toolAppID}, &st); err != nil {
		return nil, fmt.Errorf("start the tool app: %w; %s", err, r.logs(ctx))
	}
	r.appPid = st.App.Pid
	ready, err := r.awaitFrame(ctx, "ready", true, r.timeout)
	if err != nil {
		return nil, err
	}
	var v struct {
		ContextID string `json:"context_id"`
	}
	if err := json.Unmarshal(ready, &v); err != nil || v.ContextID == "" {
		return nil, fmt.Errorf("the tool app's ready frame %s has no context_id (%v)", ready, err)
	}
	r.contextID = v.ContextID
	if err := r.attach(ctx); err != nil {
		return nil, err
	}
	// The kernel names a context the daemon lists, as octosupctl call
	// does (context.list).
	var list struct {
		Contexts []struct {
			ContextID string `json:"context_id"`
		} `json:"contexts"`
	}
	if err := r.conn.Do(ctx, "context.list", control.AppArgs{App: toolAppID}, &list); err != nil {
		return nil, err
	}
	if len(list.Contexts) != 1 || list.Contexts[0].ContextID != r.contextID {
		return nil, fmt.Errorf("context.list of the tool app says %+v; the app opened %s", list.Contexts, r.contextID)
	}
	return r, nil
}

// awaitFrame waits (at most timeout) for the tool app's pass-through
// frame {"bench_app":{"event":want,…}} and returns its body; with consent
// it allows the tool app's consent approvals that come meanwhile.
func (r *appRig) awaitFrame(ctx context.Context, want string, consent bool, timeout time.Duration) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		select {
		case ev, ok := <-r.sub.Events():
			if !ok {
				return nil, fmt.Errorf("the subscription ended: %w", r.sub.Err())
			}
			switch ev.Name {
			case control.TopicApproval:
				var a control.Approval
				if err := ev.Decode(&a); err != nil {
					return nil, fmt.Errorf("decode an approval event: %w", err)
				}
				if !consent || a.App != toolAppID || a.Kind != "consent" || a.State != "pending" {
					continue
				}
				if err := r.conn.Do(ctx, control.OpApprove, control.ApproveArgs{ApprovalID: a.ApprovalID, Decision: "allow"}, nil); err != nil {
					return nil, fmt.Errorf("allow the tool app's consent: %w", err)
				}
			case control.TopicAppFrame:
				var f struct {
					App   string `json:"app"`
					Frame struct {
						Body json.RawMessage `json:"bench_app"`
					} `json:"frame"`
				}
				if err := ev.Decode(&f); err != nil || f.App != toolAppID || f.Frame.Body == nil {
					continue
				}
				var head struct {
					Event   string `json:"event"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(f.Frame.Body, &head); err != nil {
					return nil, fmt.Errorf("the tool app's frame %.200s: %w", f.Frame.Body, err)
				}
				switch head.Event {
				case want:
					return f.Frame.Body, nil
				case "error":
					return nil, fmt.Errorf("the tool app says: %s", head.Message)
				}
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("no %q frame from the tool app: %w; %s", want, ctx.Err(), r.logs(context.Background()))
		}
	}
}

// attach dials the control socket and runs kernel.attach on it with raw
// lines: the kernel of the measurements writes and reads lines itself,
// without control.Conn's reader goroutine and channel between it and the
// socket.
func (r *appRig) attach(ctx context.Context) error {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "unix", r.client.SocketPath())
	if err != nil {
		return fmt.Errorf("the kernel's connection: %w", err)
	}
	r.kernel = newLineConn(nc)
	r.kernel.out = append(r.kernel.out[:0], `{"id":1,"op":"kernel.attach","args":{}}`+"\n"...)
	nc.SetDeadline(time.Now().Add(r.timeout))
	defer nc.SetDeadline(time.Time{})
	if err := r.kernel.writeOut(); err != nil {
		return fmt.Errorf("kernel.attach: %w", err)
	}
	line, err := r.kernel.readLine()
	if err != nil {
		return fmt.Errorf("kernel.attach: %w", err)
	}
	var resp control.Response
	if err := json.Unmarshal(line, &resp); err != nil || resp.ID != 1 || !resp.OK {
		return fmt.Errorf("kernel.attach answered %s", bytes.TrimSpace(line))
	}
	return nil
}

func (r *appRig) Close() {
	if r.kernel != nil {
		r.kernel.nc.Close()
	}
	if r.conn != nil {
		r.conn.Close()
	}
	if r.sub != nil {
		r.sub.Close()
	}
	r.stop()
}

// kernelTrips are tool calls: tool.call lines on the kernel connection,
// each complete at its tool.finished event.
type kernelTrips struct {
	k         *lineConn
	base      int
	contextID string
}

func (t *kernelTrips) send(i int) error {
	t.k.out = toolCallLine(t.k.out, t.base+i, t.contextID)
	return t.k.writeOut()
}

var (
	answerPrefix   = []byte(`{"id":`)
	answerOK       = []byte(`"ok":true`)
	finishedPrefix = []byte(`{"event":"tool.finished"`)
)

func (t *kernelTrips) recv() (int, error) {
	for {
		line, err := t.k.readLine()
		if err != nil {
			return 0, fmt.Errorf("the kernel's connection: %w", err)
		}
		switch {
		case bytes.HasPrefix(line, answerPrefix):
			// tool.call's answer (accepted); its events follow.
			if !bytes.Contains(line, answerOK) {
				return 0, fmt.Errorf("tool.call refused: %s", bytes.TrimSpace(line))
			}
		case bytes.HasPrefix(line, finishedPrefix):
			var ev struct {
				CallID  string          `json:"call_id"`
				Outcome string          `json:"outcome"`
				Error   json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(line, &ev); err != nil {
				return 0, fmt.Errorf("decode %s: %w", bytes.TrimSpace(line), err)
			}
			if ev.Outcome != "ok" {
				return 0, fmt.Errorf("call %s ended %s: %s", ev.CallID, ev.Outcome, ev.Error)
			}
			return seq(ev.CallID, t.base)
		}
		// tool.acknowledged, and any other event: not the end of a call.
	}
}

// answerRequests is the kernel answering every request event at once
// with request.reply ok, until its connection closes. It returns nil
// then, or why it stopped earlier.
func (r *appRig) answerRequests() error {
	k := r.kernel
	id := int64(1000)
	for {
		line, err := k.readLine()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("the kernel's connection: %w", err)
		}
		switch {
		case bytes.HasPrefix(line, answerPrefix):
			if !bytes.Contains(line, answerOK) {
				return fmt.Errorf("request.reply refused: %s", bytes.TrimSpace(line))
			}
		case bytes.HasPrefix(line, []byte(`{"event":"request"`)):
			var req struct {
				App   string `json:"app"`
				ReqID string `json:"req_id"`
			}
			if err := json.Unmarshal(line, &req); err != nil {
				return fmt.Errorf("decode %s: %w", bytes.TrimSpace(line), err)
			}
			id++
			k.out = append(k.out[:0], `{"id":`...)
			k.out = strconv.AppendInt(k.out, id, 10)
			k.out = append(k.out, `,"op":"request.reply","args":{"app":`...)
			k.out = strconv.AppendQuote(k.out, req.App)
			k.out = append(k.out, `,"req_id":`...)
			k.out = strconv.AppendQuote(k.out, req.ReqID)
			k.out = append(k.out, `,"ok":true,"data":{}}}`+"\n"...)
			if err := k.writeOut(); err != nil {
				return fmt.Errorf("request.reply: %w", err)
			}
		}
	}
}

// appRequests has the tool app make n requests, inflight at a time, and
// returns the times it measured.
func (r *appRig) appRequests(ctx context.Context, n, inflight int) ([]time.Duration, time.Duration, error) {
	frame := fmt.Sprintf(`{"bench":{"requests":%d,"inflight":%d}}`, n, inflight)
	sctx, cancel := context.WithTimeout(ctx, r.timeout)
	err := r.conn.Do(sctx, control.OpAppSend, control.AppSendArgs{App: toolAppID, Frame: json.RawMessage(frame)}, nil)
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("app.send: %w", err)
	}
	// The bench's timeout and a millisecond for each request.
	body, err := r.awaitFrame(ctx, "requests", false, r.timeout+time.Duration(n)*time.Millisecond)
	if err != nil {
		return nil, 0, err
	}
	var res struct {
		LatNS     []int64 `json:"lat_ns"`
		ElapsedNS int64   `json:"elapsed_ns"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, 0, fmt.Errorf("the tool app's times: %w", err)
	}
	if len(res.LatNS) != n {
		return nil, 0, fmt.Errorf("the tool app timed %d requests of %d", len(res.LatNS), n)
	}
	lat := make([]time.Duration, n)
	for i, ns := range res.LatNS {
		lat[i] = time.Duration(ns)
	}
	return lat, time.Duration(res.ElapsedNS), nil
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
