package peer

import "octosup/control"

// The tests were written against names the peer package had before its
// wire types became control's; these keep them readable.
type KernelToolCall = control.ToolCall

const (
	RiskRead        = control.RiskRead
	RiskWrite       = control.RiskWrite
	RiskDestructive = control.RiskDestructive
	ConfirmNone     = control.ConfirmNone
	ConfirmHost     = control.ConfirmHost
	ConfirmApp      = control.ConfirmApp
)
