// Package visible renders text from apps and manifests for a person's
// terminal: String shows every control character, invalid byte and
// invisible format character as an escape, so that a hostile app's text
// can neither drive the terminal nor pass for another line. It is a leaf
// package: the jail's Describe uses it, and control re-exports it for
// clients (control.Visible).
package visible
