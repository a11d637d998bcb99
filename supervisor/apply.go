package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"octosup/jail"
	"octosup/policy"
)

// Apply makes m the set of apps, for the first load and every reload.
// Added apps start if autostart; removed apps stop and vanish; and each
// running (or starting) app whose process would now run differently —
// its compiled jail, program, arguments, environment or directory — is
// restarted so that it runs its new entry (with opt.KeepRunning it is
// left running and marked Stale instead). The rest of a changed entry
// (restart policy, name) takes effect at once, grants are the
// LinkHandler's, and a stopped app starts with its new entry.
//
// What a process runs is compared as compiled (Launcher.Spec), for the
// entry it started with and for the new one, so that a manifest that
// says the same thing another way restarts nothing. An entry whose jail
// does not compile now is compared field by field: changed, its app is
// restarted, and fails to start with the reason, since the manifest no
// longer describes anything it may run.
//
// m must be validated (policy.Load); Apply checks only what it relies
// on, before it changes anything, so it never half-applies. It returns
// when the starts, stops and restarts it caused are done, with what it
// did. When ctx ends first, the manifest stays applied and the rest goes
// on. Apply may be called before Run, but then waits for Run to do that
// work: start Run first, in its own goroutine.
func (s *Supervisor) Apply(ctx context.Context, m *policy.Manifest, opt ApplyOptions) (Applied, error) {
	var done Applied
	seen, err := checkIDs(m)
	if err != nil {
		return done, err
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	plan, err := s.swap(m, seen, &done)
	if err != nil {
		return done, err
	}
	if opt.Swapped != nil {
		opt.Swapped()
	}
	// cgroup files are live: changed limits need no restart.
	for _, l := range plan.limits {
		if s.applyLimitsLive(l) {
			done.Limits = append(done.Limits, l.r.id)
		}
	}
	restarts, err := s.reapply(ctx, plan.live, opt, &done)
	if err != nil {
		return done, err
	}
	if err := s.awaitApplied(ctx, plan.wait, restarts, &done); err != nil {
		return done, err
	}
	s.sayMissingLimits(done)
	return done, nil
}

// sayMissingLimits repeats, for every app that runs without some limit of
// its entry, the warning its start gave (start.go): a limit that does not
// hold is never silent, and an edited manifest is when its author looks.
// The apps this Apply started said it at their start.
func (s *Supervisor) sayMissingLimits(done Applied) {
	started := make(map[string]bool, len(done.Added)+len(done.Restarted))
	for _, id := range done.Added {
		started[id] = true
	}
	for _, c := range done.Restarted {
		started[c.ID] = true
	}
	all, _ := s.Status("") // all apps: never an error
	for _, st := range all {
		if l := st.Limits; st.Pid != 0 && !started[st.ID] && l != nil && len(l.Missing) > 0 {
			s.log.Warn("app runs without some of its limits", zap.String("app", st.ID), zap.Strings("missing", l.Missing),
				zap.String("limiter", l.Limiter), zap.Strings("applied", l.Applied))
		}
	}
}

// checkIDs checks what Apply relies on of m, before anything changes:
// every app has an id of its own. It returns the set of ids.
func checkIDs(m *policy.Manifest) (map[string]bool, error) {
	if m == nil {
		return nil, errors.New("apply manifest: nil manifest")
	}
	seen := make(map[string]bool, len(m.Apps))
	var problems []string
	for i, a := range m.Apps {
		switch {
		case a.ID == "":
			problems = append(problems, fmt.Sprintf("apps[%d]: empty id", i))
		case seen[a.ID]:
			problems = append(problems, fmt.Sprintf("apps[%d]: duplicate id %q", i, a.ID))
		}
		seen[a.ID] = true
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("apply manifest: %s (validate it with policy.Load; nothing was changed)", strings.Join(problems, "; "))
	}
	return seen, nil
}

// applyPlan is what an Apply has left to do once the new set of apps is
// in place: the runners to wait for (removed ones gone, added ones
// settled), the apps with a process whose entry it must compare, and the
// limits to write in place.
type applyPlan struct {
	entries []policy.App // Supervisor.entries, the new manifest's
	wait    []<-chan struct{}
	live    []liveEntry
	limits  []liveLimits
}

// swap makes m the set of apps, under s.mu: removed apps are told to
// leave, added ones get a runner, kept ones their new entry.
func (s *Supervisor) swap(m *policy.Manifest, seen map[string]bool, done *Applied) (applyPlan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var plan applyPlan
	if s.closed {
		return plan, fmt.Errorf("apply manifest: %w", ErrShutdown)
	}
	for _, id := range s.order {
		if !seen[id] {
			done.Removed = append(done.Removed, id)
			plan.wait = append(plan.wait, s.removeLocked(s.apps[id]))
		}
	}
	s.entries = slices.Clone(m.Apps)
	plan.entries = s.entries // the new entries, to compare with what runs
	order := make([]string, 0, len(m.Apps))
	for _, a := range m.Apps {
		order = append(order, a.ID)
		if r, ok := s.apps[a.ID]; ok {
			plan.keepLocked(r, a, m)
			continue
		}
		done.Added = append(done.Added, a.ID)
		plan.wait = append(plan.wait, s.addLocked(a))
	}
	s.order = order
	s.devMode = m.DeveloperMode
	return plan, nil
}

// removeLocked tells r's app to leave and returns what closes once it is
// gone.
func (s *Supervisor) removeLocked(r *runner) <-chan struct{} {
	delete(s.apps, r.id)
	s.removing[r] = struct{}{}
	close(r.remove)
	// A runner that never ran (Run not started yet) just vanishes.
	for i, p := range s.pending {
		if p == r {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			delete(s.removing, r)
			close(r.done)
			break
		}
	}
	return r.done
}

// addLocked creates the runner of a new app and returns what closes once
// its first autostart is over.
func (s *Supervisor) addLocked(a policy.App) <-chan struct{} {
	// An app re-added while its previous incarnation is still stopping
	// waits for that one to be gone.
	var prev <-chan struct{}
	for old := range s.removing {
		if old.id == a.ID {
			prev = old.done
		}
	}
	r := newRunner(s, a, prev)
	s.apps[a.ID] = r
	if s.started {
		s.launchLocked(r)
	} else {
		s.pending = append(s.pending, r)
	}
	return r.settled
}

// keepLocked gives a kept app its new entry a, noting what its process
// may need: limits written in place, a comparison of what it runs.
func (plan *applyPlan) keepLocked(r *runner, a policy.App, m *policy.Manifest) {
	if r.entry.Limits != a.Limits && r.status.Pid != 0 {
		plan.limits = append(plan.limits, liveLimits{r: r, leaf: r.leafPath, pid: r.status.Pid, lim: a.Limits})
	}
	// The process that runs (or is starting) runs the entry its start
	// read; the next start reads this one.
	switch r.status.State {
	case Starting, Running, Stopping:
		plan.live = append(plan.live, liveEntry{
			r: r, gen: r.procGen,
			old: r.procEntry, oldDev: r.procDev, oldNeighbours: r.procEntries,
			new: a, newDev: m.DeveloperMode, newNeighbours: plan.entries,
		})
	}
	r.entry = a
}

// reapply compares what each live process runs with its new entry and
// has the changed ones restarted (marked stale with opt.KeepRunning).
// Compiled off the lock: it reads the disk (the program's interpreter,
// where symlinks lead).
func (s *Supervisor) reapply(ctx context.Context, live []liveEntry, opt ApplyOptions, done *Applied) ([]restartWait, error) {
	var restarts []restartWait
	for _, l := range live {
		changed := s.changes(l)
		if len(changed) == 0 {
			l.r.markStale(l.gen, nil) // a reload that undid a change
			continue
		}
		if opt.KeepRunning {
			if st, ok := l.r.markStale(l.gen, changed); ok {
				done.Stale = append(done.Stale, AppChange{ID: l.r.id, Changed: changed, Status: st})
			}
			continue
		}
		c := command{kind: cmdReapply, gen: l.gen, reply: make(chan cmdResult, 1)}
		select {
		case l.r.cmds <- c:
			restarts = append(restarts, restartWait{id: l.r.id, changed: changed, reply: c.reply})
		case <-l.r.done: // shut down meanwhile: nothing to restart
		case <-ctx.Done():
			return restarts, fmt.Errorf("apply manifest: applied, but stopped before restarting %s: %w", l.r.id, ctx.Err())
		}
	}
	return restarts, nil
}

// awaitApplied waits for the starts, stops and restarts an Apply caused.
func (s *Supervisor) awaitApplied(ctx context.Context, wait []<-chan struct{}, restarts []restartWait, done *Applied) error {
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("apply manifest: applied, but stopped waiting for its apps to start and stop (is Run running?): %w", ctx.Err())
		}
	}
	for _, rw := range restarts {
		select {
		case res := <-rw.reply:
			switch {
			case res.noop:
				// Its process ended meanwhile: its next start runs the
				// new entry.
			case res.err != nil && !errors.Is(res.err, ErrStartFailed):
				return fmt.Errorf("apply manifest: applied, but the restart of %s did not happen: %w", rw.id, res.err)
			default:
				done.Restarted = append(done.Restarted, AppChange{ID: rw.id, Changed: rw.changed, Status: res.status})
			}
		case <-ctx.Done():
			return fmt.Errorf("apply manifest: applied, but stopped waiting for %s to restart: %w", rw.id, ctx.Err())
		}
	}
	return nil
}

// liveEntry is an app with a process (running, starting or stopping) as
// Apply found it: the entry that process started with, and the new one.
type liveEntry struct {
	r                            *runner
	gen                          int
	old, new                     policy.App
	oldDev, newDev               bool
	oldNeighbours, newNeighbours []policy.App
}

type restartWait struct {
	id      string
	changed []string
	reply   chan cmdResult
}

// changes compiles both entries of l (as the process's start would) and
// says what differs; nothing when the process runs what its new entry
// would.
func (s *Supervisor) changes(l liveEntry) []string {
	req := func(a policy.App, neighbours []policy.App, dev bool) jail.Request {
		return jail.Request{App: a, Neighbours: neighbours, DeveloperMode: dev, Dirs: s.cfg.Dirs, BaseEnv: s.cfg.BaseEnv}
	}
	old, oerr := s.spec(req(l.old, l.oldNeighbours, l.oldDev))
	nu, nerr := s.spec(req(l.new, l.newNeighbours, l.newDev))
	if oerr == nil && nerr == nil {
		return specChanges(old, nu)
	}
	changed := entryChanges(l.old, l.new, l.oldDev, l.newDev)
	if len(changed) == 0 && nerr != nil {
		// Its entry is as it was, but it could not start again now (its
		// program is gone, another app's grant makes one of its own
		// refused): the process it runs is left alone.
		s.log.Warn("app keeps running, but its jail no longer compiles: its next start will fail",
			zap.String("app", l.r.id), zap.Error(nerr))
	}
	return changed
}
