package control

import "octosup/internal/visible"

// Visible renders s for a person's terminal, escaping control, invisible
// and invalid characters so that an app's text can neither drive the
// terminal nor pass for another line (internal/visible). JSON output
// stays as the daemon sent it.
func Visible(s string) string { return visible.String(s) }
