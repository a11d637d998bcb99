package policy

import (
	"testing"

	"octosup/internal/asnobody"
)

// TestAsNobody runs TestCheckProgramsUnreachable, which root cannot (it
// searches every directory), as nobody: CI runs as root.
func TestAsNobody(t *testing.T) {
	out := asnobody.Run(t, "^TestCheckProgramsUnreachable$")
	asnobody.WantPassed(t, out, "TestCheckProgramsUnreachable")
}
