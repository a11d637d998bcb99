package jail

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPublicTree: the grants cover exactly what every user may read, as
// few as that takes.
func TestPublicTree(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]os.FileMode // path (dirs end in /) → mode
		want  []string               // grants, relative; dirs end in /
	}{
		{"all public is one grant", map[string]os.FileMode{"a": 0o644, "d/": 0o755, "d/b": 0o444}, []string{"./"}},
		{"a secret splits its directory", map[string]os.FileMode{"passwd": 0o644, "shadow": 0o640, "d/": 0o755, "d/b": 0o644},
			[]string{"d/", "passwd"}},
		{"a secret deep down splits each directory above it", map[string]os.FileMode{"ssl/": 0o755, "ssl/certs/": 0o755, "ssl/certs/ca": 0o644,
			"ssl/private/": 0o700, "ssl/private/key": 0o600, "ssl/openssl.cnf": 0o644},
			[]string{"ssl/certs/", "ssl/openssl.cnf"}},
		{"a directory others cannot search", map[string]os.FileMode{"a": 0o644, "x/": 0o754, "x/f": 0o644}, []string{"a"}},
		{"a directory others cannot list", map[string]os.FileMode{"a": 0o644, "x/": 0o711, "x/f": 0o644}, []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "etc")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			paths := make([]string, 0, len(c.files))
			for p := range c.files {
				paths = append(paths, p)
			}
			slices.Sort(paths) // parents first
			for _, p := range paths {
				full := filepath.Join(root, p)
				if strings.HasSuffix(p, "/") {
					if err := os.Mkdir(full, 0o755); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(full, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// Modes last, deepest first: a closed directory stays writable
			// for root only.
			slices.Reverse(paths)
			for _, p := range paths {
				if err := os.Chmod(filepath.Join(root, p), c.files[p]); err != nil {
					t.Fatal(err)
				}
			}
			grants, _, _ := publicTree(root, func(string) {})
			var got []string
			for _, g := range grants {
				rel, _ := filepath.Rel(root, g.path)
				if g.dir {
					rel += "/"
				}
				got = append(got, rel)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("grants %q, want %q", got, c.want)
			}
		})
	}
}

// TestPublicEtcIsReadAgain: a secret added to a directory granted whole
// splits it at the next start.
func TestPublicEtcIsReadAgain(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var f fileFacts
	first := f.publicTreeOf(root)
	if len(first) != 1 || first[0].path != root {
		t.Fatalf("first: %+v", first)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := f.publicTreeOf(root)
	if len(second) != 1 || second[0].path != filepath.Join(dir, "a") {
		t.Fatalf("after a secret was added: %+v", second)
	}
	// A chmod changes no directory: the watch sees it.
	if err := os.Chmod(filepath.Join(dir, "secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if third := f.publicTreeOf(root); len(third) != 1 || third[0].path != root {
		t.Fatalf("after the secret was made public: %+v", third)
	}
	if f.etc.watch == nil {
		t.Fatal("no inotify watch: the stats stood in")
	}
}
