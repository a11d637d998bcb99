package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckWritablePrograms: a program in a jail app's rw external, by
// its path or where its link leads, is a warning naming the writer; one
// outside, or in a broad app's or a read-only place, is none.
func TestCheckWritablePrograms(t *testing.T) {
	home := t.TempDir()
	d := Dirs{Home: home}
	rw := filepath.Join(home, "src")
	ro := filepath.Join(home, "docs")
	for _, p := range []string{rw, ro, filepath.Join(home, "bin")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inRW := filepath.Join(rw, "tool")
	inRO := filepath.Join(ro, "tool")
	outside := filepath.Join(home, "bin", "tool")
	for _, p := range []string{inRW, inRO, outside} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(home, "bin", "link")
	if err := os.Symlink(inRW, link); err != nil {
		t.Fatal(err)
	}
	writer := App{ID: "writer", Exec: []string{outside}, Sandbox: Sandbox{Policy: PolicyJail,
		External: []External{{Path: "~/src", Access: AccessRW}, {Path: "~/docs", Access: AccessRO}}}}
	broad := App{ID: "term", Exec: []string{outside}, Sandbox: Sandbox{Policy: PolicyBroad,
		External: []External{{Path: "~/bin", Access: AccessRW}}}}
	for _, c := range []struct {
		name, prog, want string
	}{
		{"in an rw external", inRW, `lies in ` + rw + `, which app "writer" may write`},
		{"a link into one", link, `lies in ` + rw + `, which app "writer" may write`},
		{"in a read-only external", inRO, ""},
		{"in a broad app's place", outside, ""},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			m := &Manifest{Apps: []App{writer, broad, {ID: "a", Exec: []string{c.prog}}}}
			got := m.CheckWritablePrograms(d)
			if c.want == "" {
				if len(got) != 0 {
					t.Fatalf("warnings %v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].App != "a" || !strings.Contains(got[0].Message, c.want) {
				t.Fatalf("warnings %v, want one for a with %q", got, c.want)
			}
		})
	}
}
