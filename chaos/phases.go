package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"octosup/control"
)

// phases is the run, in order: a daemon and its apps, the storm and its
// drain, the baseline's shape again, the daemon's SIGKILL, a new daemon on
// the same state, and a clean stop.
func (c *chaos) phases(ctx context.Context, rep *report) error {
	base, noDebug, accepted, err := c.firstGeneration(ctx, rep)
	if err != nil {
		return err
	}
	c.afterStorm(ctx, rep, base, noDebug, accepted)

	// Standing rules before the daemon's death.
	want := c.expectedRules()
	if err := c.checkRules(ctx, want, "before the daemon's SIGKILL"); err != nil {
		return err
	}
	rep.linef("standing rules in force before SIGKILL: %d (as approve --remember and revoke left them)", len(want))

	c.killDaemon(rep)
	if err := c.secondGeneration(ctx, rep, want); err != nil {
		return err
	}
	c.stopDaemon(rep)
	return nil
}

// firstGeneration starts the daemon, takes its baseline figures (noDebug
// when it has no debug op), runs the storm and drains it, with an
// approver answering throughout. accepted is the storm's accepted calls.
func (c *chaos) firstGeneration(ctx context.Context, rep *report) (base debugData, noDebug bool, accepted int, err error) {
	if err := c.startGeneration(ctx, 1); err != nil {
		return base, false, 0, err
	}
	apCtx, apStop := context.WithCancel(ctx)
	apDone := c.startApprover(apCtx, rand.New(rand.NewPCG(c.cfg.Seed, 7)))
	defer func() { apStop(); <-apDone }()
	if err := c.waitAppsReady(ctx, 3*time.Minute); err != nil {
		return base, false, 0, err
	}
	base, err = c.debug(ctx)
	noDebug = isCode(err, control.CodeUnknownOp)
	switch {
	case noDebug:
		c.led.Violatef("the daemon has no debug op (daemon/debug_ops.go): its fds, goroutines and RSS are not checked")
	case err != nil:
		return base, false, 0, err
	default:
		c.progressf("baseline: %s", describeDebug(base))
		rep.linef("baseline after start-up (%d apps running, 2 contexts each): %s", len(c.apps), describeDebug(base))
	}

	if err := c.storm(ctx); err != nil {
		return base, noDebug, 0, err
	}
	// Drain: every accepted call's outcome, bounded by the deadlines.
	if err := c.ensureKernel(ctx); err != nil {
		c.led.Violatef("the kernel could not attach after the storm: %v", err)
	}
	c.drain(ctx, "storm")
	c.led.Close()
	counts := c.led.Counts()
	rep.linef("storm: %d tool.call sent, %d accepted, %d finished (%d of them on a later kernel connection than the one that made the call: queued while detached or in flight at the detach)",
		counts["sent"], counts["accepted"], counts["finished"], counts["outcomes on a later kernel connection"])
	return base, noDebug, counts["accepted"], nil
}

// storm runs the kernel's workers and the driver for the storm's duration.
func (c *chaos) storm(ctx context.Context) error {
	c.progressf("storm for %v", c.cfg.Duration)
	stormCtx, stormStop := context.WithTimeout(ctx, c.cfg.Duration)
	defer stormStop()
	var wg sync.WaitGroup
	for w := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.worker(stormCtx, w, rand.New(rand.NewPCG(c.cfg.Seed, uint64(100+w))))
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.driver(stormCtx, rand.New(rand.NewPCG(c.cfg.Seed, 9)))
	}()
	wg.Wait()
	return ctx.Err()
}

// afterStorm brings the daemon back to the baseline's shape, then checks
// its figures against the baseline's.
func (c *chaos) afterStorm(ctx context.Context, rep *report, base debugData, noDebug bool, accepted int) {
	if err := c.restoreApps(ctx); err != nil {
		c.led.Violatef("after the storm: %v", err)
	}
	if noDebug {
		return
	}
	after, why := c.settle(ctx, base, accepted, 30*time.Second)
	rep.linef("after the storm (all apps running again):  %s", describeDebug(after))
	rep.linef("  budget: fds +%d, goroutines +%d, rss up to %s (baseline + %s + %d B per accepted call up to %d per app)",
		fdSlack, goroutineSlack, mib(rssLimit(base, accepted, len(c.apps))), mib(rssSlackBytes), rssPerCall, windowPerApp)
	if why != "" {
		c.led.Violatef("the daemon's resources did not return to their baseline within 30s: %s", why)
	}
}

// hangUpAll marks the run's connections as ended by us, so that the
// daemon's going does not count as it dropping them.
func (c *chaos) hangUpAll() {
	c.krw.Lock()
	c.hungUp.Store(c.kconn, true)
	c.krw.Unlock()
	c.hungUp.Store(c.admin, true)
	c.hungUp.Store(c.watch, true)
}

// killDaemon SIGKILLs the daemon: no app may outlive it.
func (c *chaos) killDaemon(rep *report) {
	oldPid := c.d.Pid()
	extra := c.procs.TrackChildren(oldPid)
	c.hangUpAll()
	c.progressf("SIGKILL octosupd %d", oldPid)
	c.d.Kill()
	checked, alive := c.procs.Survivors(oldPid, 10*time.Second)
	for _, a := range alive {
		c.led.Violatef("an app outlived the daemon: %s", a)
	}
	rep.linef("SIGKILL of octosupd %d: %d app processes seen during the run (%d found as its children at the end), %d alive 10s later", oldPid, checked, extra, len(alive))
	c.procs.Release(oldPid)
	c.closeConns()
}

// secondGeneration starts a new daemon on the same state: the standing
// rules (want) and the first-use consent must have been kept, and one
// call into each app gets exactly one outcome.
func (c *chaos) secondGeneration(ctx context.Context, rep *report, want map[string]string) error {
	if err := c.startGeneration(ctx, 2); err != nil {
		return err
	}
	apCtx, apStop := context.WithCancel(ctx)
	apDone := c.startApprover(apCtx, rand.New(rand.NewPCG(c.cfg.Seed, 8)))
	defer func() { apStop(); <-apDone }()
	if err := c.checkRules(ctx, want, "after the daemon's restart"); err != nil {
		return err
	}
	rep.linef("standing rules after restart on the same state: %d, all in force", len(want))
	if err := c.waitAppsReady(ctx, 3*time.Minute); err != nil {
		return err
	}
	if n := c.consentAsked[2].Load(); n > 0 {
		c.led.Violatef("the restarted daemon asked for consent %d time(s): the first-use decisions were not kept", n)
	}
	sent := c.sanityCalls(ctx)
	c.drain(ctx, "after restart")
	c.led.Close()
	rep.linef("after restart: every app running with its contexts, consent kept; %d calls (one per app) each got exactly one outcome", sent)
	return nil
}

// stopDaemon stops the daemon cleanly: the apps go with it.
func (c *chaos) stopDaemon(rep *report) {
	pid := c.d.Pid()
	c.procs.TrackChildren(pid)
	c.hangUpAll()
	if err := c.d.Stop(30 * time.Second); err != nil {
		c.notef("%v", err)
	}
	checked, alive := c.procs.Survivors(pid, 10*time.Second)
	for _, a := range alive {
		c.led.Violatef("an app outlived the daemon's SIGTERM: %s", a)
	}
	rep.linef("SIGTERM of octosupd %d: %d app processes, %d alive 10s later", pid, checked, len(alive))
	c.procs.Release(pid)
}
