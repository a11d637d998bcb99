package control

import (
	"encoding/json"
	"time"
)

// Ops of the peer link (docs/control.md): approvals and consent,
// pass-through frames, and the agent kernel's role.
const (
	OpApprovals    = "approvals"
	OpApprove      = "approve"
	OpConsent      = "consent"
	OpAppSend      = "app.send"
	OpKernelAttach = "kernel.attach"
	OpRequestReply = "request.reply"
	OpRequestEvent = "request.event"
)

// Events an attached kernel's connection receives, besides tool events.
const (
	EventRequest       = "request"
	EventContextClosed = "context.closed"
)

// CodeNotAttached refuses a kernel op on a connection that did not run
// kernel.attach.
const CodeNotAttached = "not_attached"

// CodeUnknownApproval refuses an approve whose id no pending approval has
// (answered, expired, or its app exited).
const CodeUnknownApproval = "unknown_approval"

// Approval is a question to the person, pending (or settled, in an
// approval event): first-use consent, or host confirmation of a tool call.
type Approval struct {
	ApprovalID string `json:"approval_id"`
	App        string `json:"app"`
	Kind       string `json:"kind"`             // "consent" or "tool"
	State      string `json:"state"`            // "pending", "allowed", "denied", "expired", "cancelled"
	Method     string `json:"method,omitempty"` // the request that raised it
	// A tool confirmation's call: id, tool, risk, args (a summary, at most
	// 256 bytes), the context's account and the kernel's caller.
	CallID  string `json:"call_id,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Risk    string `json:"risk,omitempty"`
	Args    string `json:"args,omitempty"`
	Account string `json:"account,omitempty"`
	Caller  string `json:"caller,omitempty"`
	// The member order is the wire's: the daemon writes this type.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// ApprovalsData answers approvals, oldest first.
type ApprovalsData struct {
	Approvals []Approval `json:"approvals"`
}

// ApproveArgs are approve's args.
type ApproveArgs struct {
	ApprovalID string `json:"approval_id"`
	Decision   string `json:"decision"` // "allow" or "deny"
	Remember   bool   `json:"remember,omitempty"`
}

// ApproveData answers approve.
type ApproveData struct {
	Decision string `json:"decision"`
}

// ConsentArgs are consent's args.
type ConsentArgs struct {
	Action string `json:"action"` // "list" or "revoke"
	App    string `json:"app,omitempty"`
}

// Consent is one persisted first-use decision.
type Consent struct {
	App      string    `json:"app"`
	Decision string    `json:"decision"`
	At       time.Time `json:"at"`
}

// ConsentData answers consent: the decisions (list), or whether the app
// had one (revoke).
type ConsentData struct {
	Consents []Consent `json:"consents,omitempty"`
	Revoked  *bool     `json:"revoked,omitempty"`
}

// AppSendArgs are app.send's args.
type AppSendArgs struct {
	App   string          `json:"app"`
	Frame json.RawMessage `json:"frame"`
}

// AppFrameEvent is the body of an app.frame event: an app's pass-through
// frame, unchanged.
type AppFrameEvent struct {
	App   string          `json:"app"`
	Frame json.RawMessage `json:"frame"`
}

// AttachData answers kernel.attach.
type AttachData struct {
	Attached bool `json:"attached"`
}

// ContextClosedEvent is the body of a context.closed event.
type ContextClosedEvent struct {
	App       string `json:"app"`
	ContextID string `json:"context_id"`
	Reason    string `json:"reason"`
}
