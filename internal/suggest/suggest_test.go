package suggest

import "testing"

func TestNearest(t *testing.T) {
	names := []string{"network", "tcp_connect", "tcp", "processes", "app"}
	for _, c := range []struct{ in, want string }{
		{"Network", "network"},          // case only
		{"netwrok", "network"},          // a swap of neighbours
		{"tcp_conect", "tcp_connect"},   // a deletion
		{"tpc", "tcp"},                  // short names: one edit
		{"apx", "app"},                  // one substitution
		{"axx", ""},                     // two edits on a short name: too far
		{"storage", ""},                 // nothing close
		{string(make([]byte, 100)), ""}, // past the length a typo has
	} {
		if got := Nearest(c.in, names); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
