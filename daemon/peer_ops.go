package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/peer"
	"octosup/policy"
)

// peerLink is the daemon's side of the peer link: the state store and
// the peer.Manager running every app's hub. As the Manager's Events it
// turns approvals and pass-through frames into control-socket events.
type peerLink struct {
	store *policy.Store
	m     *peer.Manager
	log   *zap.Logger
	// srv is set before any app can start; before, events reach nobody.
	srv atomic.Pointer[Server]
}

// openPeerLink opens the state store, where a second daemon on the same
// state stops. A damaged or unwritable state file does not stop it
// (policy.OpenStoreWith moves it aside or runs on a runtime copy): that
// is logged here, and status and STATUS= say it while the daemon runs.
func openPeerLink(dirs policy.Dirs, log *zap.Logger) (*peerLink, error) {
	st, err := policy.OpenStoreWith(policy.StoreConfig{Path: filepath.Join(dirs.State, policy.StoreFile), Scratch: dirs.Runtime})
	if err != nil {
		return nil, fmt.Errorf("open the state store: %w", err)
	}
	if h := st.Health(); !h.Healthy() {
		log.Error("the state store was not usable as it was: the daemon runs on", zap.String("path", h.Path), zap.Strings("notes", h.Notes()))
	}
	p := &peerLink{store: st, log: log}
	p.m = peer.New(peer.Config{Store: st, Events: p, Log: log})
	return p, nil
}

// Close ends every link, then the store; call it once every app stopped.
func (p *peerLink) Close() {
	p.m.Close()
	if err := p.store.Close(); err != nil {
		p.log.Warn("close the state store", zap.Error(err))
	}
}

// Approval publishes an approval as it is raised and settled.
func (p *peerLink) Approval(a peer.Approval) {
	if s := p.srv.Load(); s != nil {
		s.publish(control.TopicApproval, a.App, a)
	}
}

// AppFrame publishes a pass-through frame of an app, unchanged.
func (p *peerLink) AppFrame(app string, frame json.RawMessage) {
	if s := p.srv.Load(); s != nil {
		s.publish(control.TopicAppFrame, app, control.AppFrameEvent{App: app, Frame: frame})
	}
}

// storeStatus is status's store member.
func (p *peerLink) storeStatus() *control.StoreStatus { return wireStoreStatus(p.store.Health()) }

// storeNotes are the store's notes for STATUS=.
func (p *peerLink) storeNotes() []string { return p.store.Health().Notes() }

func wireStoreStatus(h policy.Health) *control.StoreStatus {
	out := &control.StoreStatus{Path: h.Path, Healthy: h.Healthy(), Notes: nonNil(h.Notes()), Temporary: h.Temporary,
		AuditDropped: h.AuditDropped, AuditError: h.AuditError, BackupError: h.BackupError}
	if d := h.Damage; d != nil {
		out.Damage = &control.StoreDamage{At: d.At, Problem: d.Problem, MovedTo: d.MovedTo, MoveError: d.MoveError}
	}
	if r := h.Restored; r != nil {
		out.Restored = &control.StoreRestored{From: r.From, At: r.At, Problem: r.Problem}
	}
	return out
}

// register adds the peer link's ops to s and sends its events there.
func (p *peerLink) register(s *Server) {
	p.srv.Store(s)
	s.handle(control.OpApprovals, withArgs(p.opApprovals))
	s.handle(control.OpApprove, p.opApprove)
	s.handle(control.OpConsent, withArgs(p.opConsent))
	s.handle(control.OpAppSend, withArgs(p.opAppSend))
	// A turn's reply, then its events, reach the app in the kernel's order
	// (docs/protocol.md).
	s.handleOrdered(control.OpKernelAttach, withArgs(p.opKernelAttach))
	s.handleOrdered(control.OpRequestReply, kernelOp((*peer.KernelSession).Reply))
	s.handleOrdered(control.OpRequestEvent, kernelOp((*peer.KernelSession).Event))
	p.registerToolOps(s)
}

func (p *peerLink) opApprovals(_ context.Context, _ *Conn, args struct{}) (any, error) {
	return control.ApprovalsData{Approvals: p.m.Approvals()}, nil
}

func (p *peerLink) opApprove(_ context.Context, _ *Conn, raw json.RawMessage) (any, error) {
	var args control.ApproveArgs
	if err := control.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.ApprovalID == "" {
		return nil, control.Errorf(control.CodeBadRequest, "args.approval_id is missing: the id of a pending approval, as the approvals op lists it")
	}
	d, err := policy.ParseDecision(args.Decision)
	if err != nil {
		return nil, control.Errorf(control.CodeBadRequest, "%v", err)
	}
	var members map[string]json.RawMessage
	_ = json.Unmarshal(raw, &members) // an object DecodeArgs took, or none
	// A pending consent's (a kind never changes; one gone is Approve's to refuse).
	consent := func(a peer.Approval) bool { return a.ApprovalID == args.ApprovalID && a.Kind == peer.KindConsent }
	if _, remember := members["remember"]; remember && slices.ContainsFunc(p.m.Approvals(), consent) {
		// Whatever its value: the docs refuse the member for a consent.
		return nil, control.Errorf(control.CodeBadRequest, "remember is for tool confirmations: a consent answer is always kept, until consent revoke; answer it without remember")
	}
	if err := p.m.Approve(args.ApprovalID, d, args.Remember); err != nil {
		return nil, err
	}
	return control.ApproveData{Decision: string(d)}, nil
}

func (p *peerLink) opConsent(_ context.Context, _ *Conn, args control.ConsentArgs) (any, error) {
	switch args.Action {
	case "list":
		all, err := p.m.Consents()
		if err != nil {
			return nil, err
		}
		out := []control.Consent{}
		for _, c := range all {
			if args.App == "" || c.App == args.App {
				out = append(out, control.Consent{App: c.App, Decision: string(c.Decision), At: c.At})
			}
		}
		return control.ConsentData{Consents: out}, nil
	case "revoke":
		if args.App == "" {
			return nil, control.Errorf(control.CodeBadRequest, "args.app is missing: the app whose decision to forget")
		}
		found, err := p.m.RevokeConsent(args.App)
		if err != nil {
			return nil, err
		}
		return control.ConsentData{Revoked: &found}, nil
	default:
		return nil, control.Errorf(control.CodeBadRequest, "args.action is %q: use \"list\" or \"revoke\"", args.Action)
	}
}

func (p *peerLink) opAppSend(_ context.Context, _ *Conn, args control.AppSendArgs) (any, error) {
	if args.App == "" || len(args.Frame) == 0 {
		return nil, control.Errorf(control.CodeBadRequest, "args.app and args.frame (one JSON object) are both needed")
	}
	// Queued with the frame, so the app's reply (an app.frame event)
	// follows the answer; a frame that could not go is the answer.
	return step(func(queue func(any)) error {
		return p.m.Send(args.App, args.Frame, func() { queue(nil) })
	}), nil
}

// connKernel is an attached kernel as the peer link sees it: events on
// its connection, after kernel.attach's answer. Its methods never block:
// a kernel that does not read is dropped.
type connKernel struct {
	c *Conn
}

func (k *connKernel) event(topic string, ev any) error {
	// Encoded now: the caller may reuse ev's memory.
	line, err := control.EncodeEvent(topic, ev)
	if err != nil {
		return err
	}
	if !k.c.event(line) {
		return errors.New("send an event: the kernel connection is gone or too slow")
	}
	return nil
}

func (k *connKernel) Request(r peer.KernelRequest) error { return k.event(control.EventRequest, r) }

func (k *connKernel) ContextClosed(app, contextID, reason string) {
	if err := k.event(control.EventContextClosed, control.ContextClosedEvent{App: app, ContextID: contextID, Reason: reason}); err != nil {
		k.c.log.Warn("kernel missed context.closed", zap.String("app", app), zap.String("context_id", contextID), zap.Error(err))
	}
}

// opKernelAttach's answer is queued by AttachKernel before anything can
// reach the kernel.
func (p *peerLink) opKernelAttach(_ context.Context, c *Conn, args struct{}) (any, error) {
	if c.kernel.Load() != nil {
		return nil, control.Errorf(control.CodeBadRequest, "this connection is already the kernel")
	}
	return step(func(queue func(any)) error {
		ks, err := p.m.AttachKernel(&connKernel{c: c}, func() { queue(control.AttachData{Attached: true}) })
		if err != nil {
			return err
		}
		c.kernel.Store(ks)
		return nil
	}), nil
}

// attached is c's kernel session, or not_attached.
func attached(c *Conn) (*peer.KernelSession, error) {
	ks := c.kernel.Load()
	if ks == nil {
		return nil, control.Errorf(control.CodeNotAttached, "this connection is not the kernel: send kernel.attach first")
	}
	return ks, nil
}

// kernelOp is the handler of a kernel session op f: another connection
// is refused not_attached before its args are decoded (as withArgs).
func kernelOp[A any](f func(ks *peer.KernelSession, args A) error) handler {
	return func(_ context.Context, c *Conn, raw json.RawMessage) (any, error) {
		ks, err := attached(c)
		if err != nil {
			return nil, err
		}
		var args A
		if err := control.DecodeArgs(raw, &args); err != nil {
			return nil, err
		}
		return nil, f(ks, args)
	}
}
