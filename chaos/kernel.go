package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"octosup/control"
)

// The kernel's side of a run: one connection attached at a time, which
// the storm's workers share for reading (krw) and a detach takes whole.

// attachLocked opens a kernel connection and attaches it, waiting for a
// kernel that is still detaching. krw is held.
func (c *chaos) attachLocked(ctx context.Context) error {
	kc, err := dialConn(ctx, c.tree.Socket, c.nextConn(), c.onKernelEvent)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := kc.do(ctx, control.OpKernelAttach, struct{}{}, nil, func(resp control.Response) {
			if resp.OK {
				c.led.ConnNote(kc.id, "kernel.attach answered")
			}
		})
		if err == nil {
			break
		}
		var cerr *control.Error
		if !errors.As(err, &cerr) || cerr.Code != "kernel_attached" || time.Now().After(deadline) {
			kc.close()
			return fmt.Errorf("kernel.attach: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.kconn = kc
	go func() {
		c.watchDrop(kc, "kernel")
		c.led.ConnNote(kc.id, "ended: %v", kc.Err())
	}()
	return nil
}

func (c *chaos) onKernelEvent(kc *conn, name string, line []byte) {
	switch name {
	case eventAck, eventFinished:
		c.led.Event(name, line, kc.id)
	case control.EventContextClosed:
		var ev control.ContextClosedEvent
		if json.Unmarshal(line, &ev) == nil {
			c.mu.Lock()
			ids := c.contexts[ev.App]
			for i, id := range ids {
				if id == ev.ContextID {
					c.contexts[ev.App] = append(ids[:i:i], ids[i+1:]...)
					break
				}
			}
			c.mu.Unlock()
		}
	}
}

// reattach detaches the kernel cleanly (no tool.call in flight, every
// event already written read), stays away for pause, and attaches again.
// Outcomes produced meanwhile are queued by the daemon for the new one.
func (c *chaos) reattach(ctx context.Context, pause time.Duration, dead *conn) error {
	c.krw.Lock()
	defer c.krw.Unlock()
	if dead != nil && c.kconn != dead {
		return nil // another worker already replaced it
	}
	if old := c.kconn; old != nil {
		c.hungUp.Store(old, true)
		c.led.ConnNote(old.id, "the kernel detaches: end-of-file sent, reading what is left")
		if err := old.hangUp(10 * time.Second); err != nil {
			c.notef("kernel detach: %v", err)
		}
		c.kconn = nil
	}
	c.led.Count("kernel detached", 1)
	if pause > 0 {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
	return c.attachLocked(context.WithoutCancel(ctx))
}

func (c *chaos) ensureKernel(ctx context.Context) error {
	c.krw.Lock()
	defer c.krw.Unlock()
	if c.kconn != nil && c.kconn.Err() == nil {
		return nil
	}
	return c.attachLocked(ctx)
}

// withKernel runs fn on the kernel's connection, with no detach meanwhile.
func (c *chaos) withKernel(fn func(kc *conn)) bool {
	c.krw.RLock()
	defer c.krw.RUnlock()
	if c.kconn == nil {
		return false
	}
	fn(c.kconn)
	return true
}

// sendCall writes one tool.call and records it and its answer.
func (c *chaos) sendCall(_ context.Context, s callSpec, contextID string) (accepted bool) {
	args := map[string]any{"app": s.App, "call": map[string]any{
		"call_id": s.ID, "name": s.Tool, "args": map[string]any{"do": s.Do, "ms": s.MS, "late": s.Late},
		"risk": s.Risk, "confirm": s.Confirm, "timeout_ms": s.TimeoutMS, "context_id": contextID, "caller": "chaos",
	}}
	var dead *conn
	ok := c.withKernel(func(kc *conn) {
		var answered atomic.Bool
		c.led.Sent(s, kc.id)
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := kc.do(rctx, opToolCall, args, nil, func(resp control.Response) {
			answered.Store(true)
			code, msg := "", ""
			if resp.Error != nil {
				code, msg = resp.Error.Code, resp.Error.Message
			}
			c.led.Answered(s.App, s.ID, kc.id, resp.OK, code, msg)
		})
		accepted = err == nil
		if !answered.Load() {
			c.led.Lost(s.App, s.ID, kc.id, fmt.Sprint(err))
			dead = kc
		} else if err != nil {
			var cerr *control.Error
			if errors.As(err, &cerr) && cerr.Code == control.CodeNotAttached {
				dead = kc
			}
		}
	})
	// The kernel's connection is gone (the daemon dropped it): attach a
	// new one; what was queued meanwhile comes to it.
	switch {
	case dead != nil:
		if err := c.reattach(context.Background(), 0, dead); err != nil {
			c.notef("re-attach the kernel: %v", err)
		}
	case !ok:
		if err := c.ensureKernel(context.Background()); err != nil {
			c.notef("attach the kernel: %v", err)
		}
	}
	return accepted
}
