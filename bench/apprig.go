package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"octosup/control"
	"octosup/policy"
)

// The tool app under a real daemon, with its session open and the bench
// attached as its kernel: the real path of the tools and requests
// sections.

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
