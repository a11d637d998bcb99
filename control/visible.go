package control

import "octosup/internal/visible"

// Visible renders s for a person's terminal: every control character,
// invalid byte and invisible format character becomes an escape, so that
// text from an app can neither drive the terminal nor pass for another
// line (internal/visible has the rules). A client prints through it what
// it shows a person; its JSON output stays as the daemon sent it.
func Visible(s string) string { return visible.String(s) }
