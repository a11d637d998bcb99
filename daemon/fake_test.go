package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"octosup/policy"
	"octosup/supervisor"
)

// fakeApps is an in-memory supervisor: apps move between states at once
// and publish events the way the real one does: to publish (Config.Publish,
// the server's), in the step under f.mu, then to the subscribers (bounded
// queues, a full one is dropped with ErrSlowSubscriber).
type fakeApps struct {
	mu      sync.Mutex
	order   []string
	apps    map[string]*supervisor.AppStatus
	logs    map[string][]supervisor.LogLine
	owners  map[int]string
	nextPid int
	applied int
	logSeq  uint64 // as the supervisor numbers lines
	moves   uint64 // and moves (AppStatus.Seq)
	// publish is the server's supervisorEvent (startServer sets it).
	publish func(supervisor.Event)
	// usageReads counts Usage calls.
	usageReads int
}

func newFakeApps(ids ...string) *fakeApps {
	f := &fakeApps{
		apps:    make(map[string]*supervisor.AppStatus),
		logs:    make(map[string][]supervisor.LogLine),
		owners:  make(map[int]string),
		nextPid: 1000,
	}
	for _, id := range ids {
		f.order = append(f.order, id)
		f.apps[id] = &supervisor.AppStatus{ID: id, State: supervisor.Stopped, Since: time.Now(), Stopper: supervisor.StopperProcessGroup}
	}
	return f
}

func (f *fakeApps) Apply(_ context.Context, m *policy.Manifest, _ supervisor.ApplyOptions) (supervisor.Applied, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied++
	return supervisor.Applied{}, nil
}

func (f *fakeApps) set(id string, state supervisor.State) (supervisor.AppStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.apps[id]
	if !ok {
		return supervisor.AppStatus{}, fmt.Errorf("%w: %q", supervisor.ErrUnknownApp, id)
	}
	f.moves++
	st.State, st.Since, st.Seq = state, time.Now(), f.moves
	switch state {
	case supervisor.Running:
		f.nextPid++
		st.Pid = f.nextPid
	case supervisor.Stopped:
		st.Pid = 0
		st.LastExit = &supervisor.Exit{Signal: "SIGTERM", At: st.Since}
	}
	cp := *st
	f.publishLocked(supervisor.Event{Kind: supervisor.KindState, State: &cp})
	return cp, nil
}

func (f *fakeApps) Start(_ context.Context, id string) (supervisor.AppStatus, error) {
	return f.set(id, supervisor.Running)
}

func (f *fakeApps) Stop(_ context.Context, id string) (supervisor.AppStatus, error) {
	return f.set(id, supervisor.Stopped)
}

func (f *fakeApps) Restart(ctx context.Context, id string) (supervisor.AppStatus, error) {
	if _, err := f.set(id, supervisor.Stopped); err != nil {
		return supervisor.AppStatus{}, err
	}
	f.mu.Lock()
	f.apps[id].Restarts++
	f.mu.Unlock()
	return f.set(id, supervisor.Running)
}

func (f *fakeApps) Status(id string) ([]supervisor.AppStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "" {
		st, ok := f.apps[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q", supervisor.ErrUnknownApp, id)
		}
		return []supervisor.AppStatus{*st}, nil
	}
	out := make([]supervisor.AppStatus, 0, len(f.order))
	for _, id := range f.order {
		out = append(out, *f.apps[id])
	}
	return out, nil
}

func (f *fakeApps) Logs(id string, n int) ([]supervisor.LogLine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastLocked(id, n)
}

// FollowLogs is Logs with join called under f.mu, as the supervisor
// calls it under the app's ring lock.
func (f *fakeApps) FollowLogs(id string, n int, join func([]supervisor.LogLine)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	lines, err := f.lastLocked(id, n)
	if err == nil {
		join(lines)
	}
	return err
}

func (f *fakeApps) lastLocked(id string, n int) ([]supervisor.LogLine, error) {
	if _, ok := f.apps[id]; !ok {
		return nil, fmt.Errorf("%w: %q", supervisor.ErrUnknownApp, id)
	}
	l := f.logs[id]
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return append([]supervisor.LogLine(nil), l...), nil
}

// write is the app id writing a line of output.
func (f *fakeApps) write(id, text string) { f.writeAt(id, text, time.Now()) }

// writeAt is write with the line stamped at (a clock that stepped back).
func (f *fakeApps) writeAt(id, text string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logSeq++
	l := supervisor.LogLine{App: id, Stream: "stdout", Text: text, At: at, Seq: f.logSeq}
	f.logs[id] = append(f.logs[id], l)
	f.publishLocked(supervisor.Event{Kind: supervisor.KindLog, Log: &l})
}

// warn is the app id running into a limit, as the supervisor's
// taskWatch says it.
func (f *fakeApps) warn(id, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := *f.apps[id]
	f.publishLocked(supervisor.Event{Kind: supervisor.KindWarning, State: &st, Warning: text})
}

// CheckCaller places the processes of owners in their apps, and every
// other outside.
func (f *fakeApps) CheckCaller(p supervisor.Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.owners[p.Pid]; ok {
		return &supervisor.CallerError{Pid: p.Pid, Inside: true, App: id, Reason: fmt.Sprintf("belongs to app %q", id)}
	}
	return nil
}

func (f *fakeApps) Entry(id string) (policy.App, bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.apps[id]; !ok {
		return policy.App{}, false, false
	}
	return policy.App{ID: id, Exec: []string{"/bin/true"}}, false, true
}

func (f *fakeApps) Entries() []policy.App {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []policy.App
	for id := range f.apps {
		out = append(out, policy.App{ID: id, Exec: []string{"/bin/true"}})
	}
	return out
}

func (f *fakeApps) publishLocked(ev supervisor.Event) {
	if f.publish != nil {
		f.publish(ev)
	}
}

// Ping answers at once.
func (f *fakeApps) Ping(context.Context) error { return nil }

// Usage is a fixed reading for a running app.
func (f *fakeApps) Usage(id string) (*supervisor.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.apps[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", supervisor.ErrUnknownApp, id)
	}
	f.usageReads++
	if st.Pid == 0 {
		return nil, nil
	}
	return &supervisor.Usage{CPUUsec: 1000, MemoryRSS: 4096, Tasks: 1, At: st.Since}, nil
}
