package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"octosup/control"
	"octosup/jail"
	"octosup/policy"
	"octosup/supervisor"
)

func (s *Server) opJail(_ context.Context, _ *Conn, args control.AppArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	if s.cfg.JailSpec == nil {
		return nil, control.Errorf(control.CodeInternal, "this daemon cannot compile jails")
	}
	spec, err := s.cfg.JailSpec(args.App)
	if err != nil {
		if errors.Is(err, supervisor.ErrUnknownApp) {
			return nil, unknownApp()
		}
		return nil, control.Errorf(control.CodeFailed, "%v", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode the jail of %s: %w", args.App, err)
	}
	return control.JailData{Spec: b, Text: jail.Describe(spec)}, nil
}

// opHello tells a client the protocol and what this daemon serves.
func (s *Server) opHello(_ context.Context, _ *Conn, args struct{}) (any, error) {
	return control.HelloData{Protocol: control.ProtocolName, Version: control.ProtocolVersion,
		Ops: slices.Sorted(maps.Keys(s.ops)), Topics: slices.Sorted(maps.Keys(s.topics)), MaxLine: control.MaxLine}, nil
}

func (s *Server) opStatus(_ context.Context, _ *Conn, args control.StatusArgs) (any, error) {
	all, err := s.cfg.Apps.Status(args.App)
	if err != nil {
		return nil, err // an unknown app is asControlError's
	}
	data := control.StatusData{Apps: make([]control.AppStatus, 0, len(all))}
	for _, st := range all {
		app := s.appStatus(st)
		if args.Usage && st.Pid != 0 {
			if u, _ := s.cfg.Apps.Usage(st.ID); u != nil { // an app removed meanwhile has none
				app.Usage = &control.Usage{CPUUsec: u.CPUUsec, MemoryCurrent: u.MemoryCurrent, MemoryPeak: u.MemoryPeak,
					MemoryRSS: u.MemoryRSS, Tasks: u.Tasks, At: u.At}
			}
		}
		data.Apps = append(data.Apps, app)
	}
	if s.cfg.Store != nil {
		data.Store = s.cfg.Store()
	}
	return data, nil
}

func (s *Server) appStatus(st supervisor.AppStatus) control.AppStatus {
	out := control.AppStatus{ID: st.ID, State: string(st.State), Pid: st.Pid, Restarts: st.Restarts, Since: st.Since,
		LastExit: wireExit(st.LastExit), Reason: st.Reason, Stopper: st.Stopper, Link: s.cfg.LinkStatus(st.ID), Stale: st.Stale}
	if st.Limits != nil {
		out.Limits = &control.LimitsReport{Limiter: st.Limits.Limiter, Applied: nonNil(st.Limits.Applied), Missing: nonNil(st.Limits.Missing)}
	}
	if st.Jail != nil {
		out.Jail = &control.JailReport{LandlockABI: st.Jail.LandlockABI, Layers: nonNil(st.Jail.Layers), Missing: nonNil(st.Jail.Missing)}
		for _, g := range st.Jail.Grants {
			out.Jail.Grants = append(out.Jail.Grants, control.Grant{Name: g.Name, Path: g.Path, Via: g.Via})
		}
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func wireExit(e *supervisor.Exit) *control.Exit {
	if e == nil {
		return nil
	}
	return &control.Exit{Code: e.Code, Signal: e.Signal, At: e.At, OOM: e.OOM}
}

func logLine(l supervisor.LogLine) control.LogLine {
	return control.LogLine{App: l.App, Stream: l.Stream, Text: l.Text, At: l.At}
}

// lifecycleOp serves start, stop and restart, answering once the app
// reached the state (or could not).
func (s *Server) lifecycleOp(op string, do func(Apps, context.Context, string) (supervisor.AppStatus, error)) handler {
	return withArgs(func(ctx context.Context, _ *Conn, args control.AppArgs) (any, error) {
		if err := needApp(args.App); err != nil {
			return nil, err
		}
		// The state's event was queued before do returns, so before this answer.
		st, err := do(s.cfg.Apps, ctx, args.App)
		if err != nil {
			switch {
			case errors.Is(err, supervisor.ErrUnknownApp):
				return nil, unknownApp()
			case ctx.Err() != nil:
				return nil, control.Errorf(control.CodeFailed, "cancelled before the app got there: %v", ctx.Err())
			case errors.Is(err, supervisor.ErrStartFailed) && st.Reason != "":
				return nil, control.Errorf(control.CodeFailed, "failed to start: %s", st.Reason)
			}
			// Less the op and app the supervisor's error begins with.
			return nil, control.Errorf(control.CodeFailed, "%s", strings.TrimPrefix(err.Error(), op+" "+args.App+": "))
		}
		if op != control.OpStop && st.State == supervisor.Failed {
			return nil, control.Errorf(control.CodeFailed, "failed to start: %s", st.Reason)
		}
		return control.StateData{State: string(st.State), App: s.appStatus(st)}, nil
	})
}

// opLogs answers the last lines; with follow, the app's log events
// follow, none lost or repeated.
func (s *Server) opLogs(_ context.Context, c *Conn, args control.LogsArgs) (any, error) {
	if err := needApp(args.App); err != nil {
		return nil, err
	}
	n := args.Lines
	if n <= 0 {
		n = defaultLines
	}
	logsData := func(lines []supervisor.LogLine) control.LogsData {
		data := control.LogsData{Lines: fitLines(lines, control.MaxLine-1024)}
		data.Truncated = len(data.Lines) < len(lines)
		return data
	}
	if !args.Follow {
		lines, err := s.cfg.Apps.Logs(args.App, n)
		if err != nil {
			return nil, err // an unknown app is asControlError's
		}
		return logsData(lines), nil
	}
	// Under the app's ring lock: the answer has the lines before, the
	// stream joined in the same step every line after.
	return step(func(queue func(any)) error {
		return s.cfg.Apps.FollowLogs(args.App, n, func(lines []supervisor.LogLine) {
			queue(logsData(lines))
			s.fanout.add(newStream(c, args.App, []string{control.TopicLog}))
		})
	}), nil
}

// opSubscribe adds topics to the connection's subscription.
func (s *Server) opSubscribe(_ context.Context, c *Conn, args control.SubscribeArgs) (any, error) {
	topics := args.Topics
	if len(topics) == 0 {
		topics = []string{control.TopicState}
	}
	known := slices.Sorted(maps.Keys(s.topics))
	var unknown []string
	for _, t := range topics {
		if !slices.Contains(known, t) {
			unknown = append(unknown, fmt.Sprintf("%q", t))
		}
	}
	if len(unknown) > 0 {
		return nil, control.Errorf(control.CodeBadRequest, "unknown topic %s: the topics are %s", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	// The answer is queued, then the topics join: an event that finds
	// them follows it. Only subMu is held: the answer may wait for room.
	return waitStep(func(queue func(any)) error {
		c.subMu.Lock()
		defer c.subMu.Unlock()
		st := c.sub
		if st == nil {
			st = newStream(c, "", nil)
		}
		queue(control.SubscribeData{Topics: slices.Sorted(maps.Keys(st.union(topics)))})
		st.addTopics(topics)
		if c.sub == nil {
			c.sub = st
			s.fanout.add(st)
		}
		return nil
	}), nil
}

func (s *Server) opReload(ctx context.Context, _ *Conn, args control.ReloadArgs) (any, error) {
	if s.cfg.Reload == nil {
		return nil, control.Errorf(control.CodeInternal, "this daemon has no manifest to reload")
	}
	n, done, err := s.cfg.Reload(ctx, supervisor.ApplyOptions{KeepRunning: args.KeepRunning})
	if err != nil {
		if verr, ok := errors.AsType[*policy.ValidationError](err); ok {
			return nil, invalidManifest(verr)
		}
		return nil, control.Errorf(control.CodeFailed, "%v", err)
	}
	return control.ReloadData{Apps: n, Added: nonNil(done.Added), Removed: nonNil(done.Removed),
		Restarted: wireChanges(done.Restarted), Stale: wireChanges(done.Stale), Limits: nonNil(done.Limits)}, nil
}

func wireChanges(list []supervisor.AppChange) []control.AppChange {
	out := make([]control.AppChange, 0, len(list))
	for _, c := range list {
		out = append(out, control.AppChange{App: c.ID, Changed: nonNil(c.Changed),
			State: string(c.Status.State), Pid: c.Status.Pid, Reason: c.Status.Reason})
	}
	return out
}

// invalidManifest lists the problems in the message (one a line) and
// in data.problems.
func invalidManifest(verr *policy.ValidationError) *control.Error {
	probs := make([]string, 0, len(verr.Problems))
	for _, p := range verr.Problems {
		probs = append(probs, p.String())
	}
	data, _ := json.Marshal(control.ManifestProblems{Problems: probs})
	return &control.Error{Code: control.CodeInvalidManifest, Data: data,
		Message: fmt.Sprintf("the manifest has %d problem(s); the running apps are unchanged:\n%s", len(probs), strings.Join(probs, "\n"))}
}

// fitLines returns the newest lines whose encoding fits in budget bytes,
// oldest first.
func fitLines(lines []supervisor.LogLine, budget int) []control.LogLine {
	first := len(lines)
	for first > 0 {
		b, err := json.Marshal(logLine(lines[first-1]))
		if err != nil || len(b)+1 > budget {
			break
		}
		budget -= len(b) + 1
		first--
	}
	out := make([]control.LogLine, 0, len(lines)-first)
	for _, l := range lines[first:] {
		out = append(out, logLine(l))
	}
	return out
}

// unknownApp is every op's answer about an app the manifest lacks.
func unknownApp() *control.Error {
	return control.Errorf(control.CodeUnknownApp, "the manifest has no such app: status lists those it has")
}

// needApp refuses a missing args.app.
func needApp(app string) error {
	if app == "" {
		return control.Errorf(control.CodeBadRequest, "args.app is missing: name an app by the id of its manifest entry")
	}
	return nil
}
