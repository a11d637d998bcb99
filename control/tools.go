package control

import (
	"encoding/json"
	"time"

	"octosup/policy"
)

// The tool-call ops (docs/control.md): the kernel's calls into apps, the
// standing rules and audit trail they leave; and the jail op.
const (
	OpToolCall     = "tool.call"
	OpToolCancel   = "tool.cancel"
	OpContextOwner = "context.owner"
	OpContextList  = "context.list"
	OpLinkHas      = "link.has"
	OpAccountClose = "account.close"
	OpRules        = "rules"
	OpAudit        = "audit"
	OpJail         = "jail"
)

// Events a kernel connection receives for the calls it made.
const (
	EventToolAcknowledged = "tool.acknowledged"
	EventToolFinished     = "tool.finished"
)

// CodeKernelAttached refuses kernel.attach while another connection is
// the kernel.
const CodeKernelAttached = "kernel_attached"

// Refusals a client may say more about (octosupctl names the command
// that undoes them): a tool call declined (by the person, the app or a
// rule), and an app's requests refused because the person denied it the
// agent service.
const (
	CodeDeclined      = "declined"
	CodeConsentDenied = "consent_denied"
)

// Values of ToolCall.Confirm and ToolCall.Risk, and of ToolEvent.Outcome.
const (
	ConfirmNone = "none"
	ConfirmHost = "host"
	ConfirmApp  = "app"

	RiskRead        = "read"
	RiskWrite       = "write"
	RiskDestructive = "destructive"

	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeUnknown = "outcome_unknown"
)

// ToolCall is the call member of tool.call's args. The daemon stamps
// account and client from its own records.
type ToolCall struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	Risk      string          `json:"risk,omitempty"`
	Confirm   string          `json:"confirm,omitempty"`
	TimeoutMS int64           `json:"timeout_ms"`
	ContextID string          `json:"context_id"`
	Caller    string          `json:"caller,omitempty"`
}

// ToolCallArgs are tool.call's args.
type ToolCallArgs struct {
	App  string   `json:"app"`
	Call ToolCall `json:"call"`
}

// ToolCallData answers tool.call: accepted; its tool.acknowledged and
// tool.finished events follow on this connection.
type ToolCallData struct {
	CallID   string `json:"call_id"`
	Accepted bool   `json:"accepted"`
}

// CallArgs are tool.cancel's args.
type CallArgs struct {
	App    string `json:"app"`
	CallID string `json:"call_id"`
}

// ToolEvent is the body of tool.acknowledged and tool.finished.
type ToolEvent struct {
	App     string          `json:"app"`
	CallID  string          `json:"call_id"`
	Outcome string          `json:"outcome,omitempty"` // finished: ok, error, outcome_unknown
	Data    json.RawMessage `json:"data,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// ContextArgs are context.owner's args; ContextOwner answers it.
type ContextArgs struct {
	App       string `json:"app"`
	ContextID string `json:"context_id"`
}

// ContextOwner answers context.owner, from the daemon's own records.
type ContextOwner struct {
	Account string `json:"account"`
	Client  string `json:"client"`
}

// ContextInfo is one open context of an app.
type ContextInfo struct {
	ContextID string `json:"context_id"`
	Account   string `json:"account"`
	Client    string `json:"client"`
}

// ContextsData answers context.list (args AppArgs).
type ContextsData struct {
	Contexts []ContextInfo `json:"contexts"`
}

// LinkData answers link.has (args AppArgs).
type LinkData struct {
	Connected bool `json:"connected"`
}

// AccountArgs are account.close's args.
type AccountArgs struct {
	App     string `json:"app"`
	Account string `json:"account"`
}

// AccountData answers account.close: how many contexts closed.
type AccountData struct {
	Closed int `json:"closed"`
}

// RulesArgs are rules's args: list (app optional) or revoke (app, and
// tool or, absent, every rule of app).
type RulesArgs struct {
	Action string `json:"action"`
	App    string `json:"app,omitempty"`
	Tool   string `json:"tool,omitempty"`
}

// Rule is a standing decision for an app's tool, made by approve
// --remember.
type Rule struct {
	App      string    `json:"app"`
	Tool     string    `json:"tool"`
	Decision string    `json:"decision"`
	At       time.Time `json:"at"`
}

// RulesData answers rules: the rules listed, or the ones revoked.
type RulesData struct {
	Rules []Rule `json:"rules"`
}

// AuditArgs are audit's args: the last Limit (default 100) finished calls
// of App ("" for all).
type AuditArgs struct {
	App   string `json:"app,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// AuditEntry is one finished call in the audit trail, as stored.
type AuditEntry = policy.AuditEntry

// AuditData answers audit, oldest first.
type AuditData struct {
	Entries []AuditEntry `json:"entries"`
}

// JailData answers jail (args AppArgs): the spec the app would get
// starting now, as JSON and rendered for a person.
type JailData struct {
	Spec json.RawMessage `json:"spec"`
	Text string          `json:"text"`
}
