package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckPrograms: a program that is not there, not a file or not
// executable by this user is a warning naming the app, exec[0] and the
// path; an executable file, directly or through a symlink, is none.
func TestCheckPrograms(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(name, to string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe := write("exe", 0o755)
	plain := write("plain", 0o644)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		want       string // the warning, "" for none
	}{
		{"executable", exe, ""},
		{"symlink to executable", link("to-exe", exe), ""},
		{"missing", filepath.Join(dir, "gone"),
			`app "a": exec[0]: ` + filepath.Join(dir, "gone") + ` does not exist: the app will fail to start until it does (fix: install the program there, or correct the path)`},
		{"dangling symlink", link("dangling", filepath.Join(dir, "nowhere")),
			`app "a": exec[0]: ` + filepath.Join(dir, "dangling") + ` does not exist: the app will fail to start until it does (fix: install the program there, or correct the path)`},
		{"not executable", plain,
			`app "a": exec[0]: ` + plain + ` is not executable: the app will fail to start until it is (fix: chmod +x ` + plain + `, or correct the path)`},
		{"directory", sub,
			`app "a": exec[0]: ` + sub + ` is a directory, not a program: the app will fail to start (fix: name the program's file, not its directory)`},
		{"no exec", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := App{ID: "a"}
			if c.path != "" {
				app.Exec = []string{c.path, "--flag"}
			}
			m := &Manifest{Apps: []App{app, {ID: "ok", Exec: []string{exe}}}}
			got := m.CheckPrograms()
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("warnings %v, want none", got)
			case c.want != "" && (len(got) != 1 || got[0].String() != c.want):
				t.Errorf("warnings %v, want one:\n%s", got, c.want)
			}
		})
	}
}

// TestCheckProgramsUnreachable: a program behind a directory this user
// may not search is a warning too (root searches every directory).
func TestCheckProgramsUnreachable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root searches every directory")
	}
	dir := filepath.Join(t.TempDir(), "closed")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "prog")
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	m := &Manifest{Apps: []App{{ID: "a", Exec: []string{p}}}}
	got := m.CheckPrograms()
	want := `app "a": exec[0]: ` + p + ` cannot be reached (permission denied): the app will fail to start until it can (fix: make its directories searchable by you, or correct the path)`
	if len(got) != 1 || got[0].String() != want {
		t.Fatalf("warnings %v, want one:\n%s", got, want)
	}
}
