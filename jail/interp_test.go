package jail

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"octosup/policy"
)

func TestShebang(t *testing.T) {
	long := "#!/" + strings.Repeat("a", 300)
	for _, c := range []struct {
		name, head, want, err string
	}{
		{"plain", "#!/bin/sh\necho", "/bin/sh", ""},
		{"argument", "#!/usr/bin/env python3\n", "/usr/bin/env", ""},
		{"blanks before and after", "#! \t/bin/sh \t\n", "/bin/sh", ""},
		{"tab separates", "#!/bin/sh\t-e\n", "/bin/sh", ""},
		{"NUL ends the name", "#!/bin/sh\x00junk\n", "/bin/sh", ""},
		{"no newline, short file", "#!/bin/sh", "/bin/sh", ""},
		// What strings.Fields took for separators is part of the name.
		{"CR", "#!/d/L\rx\n", "/d/L\rx", ""},
		{"CRLF line", "#!/bin/sh\r\n", "/bin/sh\r", ""},
		{"VT", "#!/d/L\vx\n", "/d/L\vx", ""},
		{"FF", "#!/d/L\fx\n", "/d/L\fx", ""},
		{"NEL", "#!/d/L\u0085x\n", "/d/L\u0085x", ""},
		{"NBSP", "#!/d/L\u00a0x\n", "/d/L\u00a0x", ""},
		{"not a script", "\x7fELF", "", "not a #! script"},
		{"one byte", "#", "", "not a #! script"},
		{"no name", "#!   \n", "", "names no interpreter"},
		{"only blanks to the end", "#!" + strings.Repeat(" ", 300), "", "only blanks"},
		// A name that fills the buffer would be truncated: refused.
		{"name past the buffer", long, "", "runs past the first 256 bytes"},
		{"name ends in the buffer", "#!/" + strings.Repeat("a", 250) + " " + strings.Repeat("b", 50), "/" + strings.Repeat("a", 250), ""},
		{"newline past the buffer", "#!/bin/sh " + strings.Repeat("x", 300) + "\n", "/bin/sh", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := []byte(c.head)
			if len(head) > binprmBufSize {
				head = head[:binprmBufSize]
			}
			got, err := shebang(head)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("shebang(%q) = %q, %v; want an error with %q", c.head, got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("shebang(%q) = %q, %v; want %q", c.head, got, err, c.want)
			}
		})
	}
}

// FuzzShebang holds shebang to what load_script can give: a non-empty
// name taken from the line after "#!", holding no space, tab, NUL or
// newline.
func FuzzShebang(f *testing.F) {
	for _, s := range []string{"#!/bin/sh\n", "#!/d/L\rx\n", "#! /usr/bin/env a b\n", "#!", "#!\t\t\n", "#!/a\x00b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		if len(head) > binprmBufSize {
			head = head[:binprmBufSize]
		}
		name, err := shebang(head)
		if err != nil {
			return
		}
		if name == "" || strings.ContainsAny(name, " \t\n\x00") {
			t.Fatalf("shebang(%q) = %q", head, name)
		}
		line, _, _ := bytes.Cut(head[2:], []byte("\n"))
		if !bytes.Contains(line, []byte(name)) {
			t.Fatalf("shebang(%q) = %q, not on its line", head, name)
		}
	})
}

// TestInterpreterChain: a script whose interpreter is a script is
// followed as the kernel follows it, and a chain the kernel would give
// up on (a loop, more than five levels) is an error, not a recursion
// without end.
func TestInterpreterChain(t *testing.T) {
	dir := t.TempDir()
	script := func(name, interp string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!"+interp+" -x\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inner := script("inner", "/bin/sh")
	outer := script("outer", inner)
	got, err := interpreters(outer)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || got[0] != inner || got[1] != "/bin/sh" {
		t.Fatalf("interpreters(outer) = %v, want [%s /bin/sh <its ELF interpreter>]", got, inner)
	}
	loop := filepath.Join(dir, "loop")
	script("loop", loop)
	if _, err := interpreters(loop); err == nil || !strings.Contains(err.Error(), "ELOOP") {
		t.Fatalf("interpreters(loop) = %v, want the kernel's ELOOP", err)
	}
	prev := "/bin/sh"
	for i := range maxScriptLevels {
		prev = script("level"+string(rune('a'+i)), prev)
	}
	if _, err := interpreters(prev); err != nil {
		t.Fatalf("%d levels: %v", maxScriptLevels, err)
	}
	if _, err := interpreters(script("one-too-many", prev)); err == nil || !strings.Contains(err.Error(), "ELOOP") {
		t.Fatalf("%d levels = %v, want ELOOP", maxScriptLevels+1, err)
	}
	if _, err := interpreters(script("relative", "sh")); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("a relative interpreter: %v", err)
	}
}

// TestShebangGrantsOnlyWhatTheKernelRuns is the adversarial review's
// escape, on both launchers: a program whose #! line is "#!DIR/L<sep>x",
// with DIR/L a link to / and DIR/L<sep>x a link to /bin/sh. The kernel
// runs /bin/sh on it, which reads the user's private key; a daemon that
// split the line at <sep> granted DIR/L, that is /, read and execute, and
// the key was read (all five separators worked). Now the grant is the
// kernel's interpreter, resolved to the shell it is, and the read fails.
func TestShebangGrantsOnlyWhatTheKernelRuns(t *testing.T) {
	for _, helper := range []bool{false, true} {
		name := "fork"
		if helper {
			name = "helper"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: helper})
			w := newWorld(t, h)
			trap := filepath.Join(filepath.Dir(h.dirs.Home), "trap")
			if err := os.MkdirAll(trap, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/", filepath.Join(trap, "L")); err != nil {
				t.Fatal(err)
			}
			for _, sep := range []string{"\r", "\v", "\f", "\u0085", "\u00a0"} {
				link := filepath.Join(trap, "L"+sep+"x")
				if err := os.Symlink("/bin/sh", link); err != nil {
					t.Fatal(err)
				}
				prog := filepath.Join(trap, "prog-"+sepName(sep))
				body := "#!" + link + "\nread -r key < " + w.homeFile + "\necho \"read: $key\"\necho done\n"
				if err := os.WriteFile(prog, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
				app := h.probeApp("probe")
				app.Exec = []string{prog}
				o := h.runApp(app, nil, nil)
				if o.err != nil {
					t.Fatalf("%s: start: %v", sepName(sep), o.err)
				}
				if strings.Contains(o.out, "secret key") || !strings.Contains(o.out, "done") {
					t.Errorf("%s: the app printed %q: it read the key, or never ran", sepName(sep), o.out)
				}
				spec, err := h.l.Spec(Request{App: app, Dirs: h.dirs})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range spec.Landlock.Paths {
					if r.Path == "/" || r.Path == filepath.Join(trap, "L") {
						t.Errorf("%s: the spec grants %s (%s)", sepName(sep), r.Path, r.Why)
					}
				}
			}
		})
	}
}

func sepName(sep string) string {
	return map[string]string{"\r": "CR", "\v": "VT", "\f": "FF", "\u0085": "NEL", "\u00a0": "NBSP"}[sep]
}

// TestExecPathsAreGrantedLikeExternals: the program and its interpreters
// are resolved through their links and checked, as externals are: a
// link to a directory (which the rule would grant whole), a link planted
// in a place a jail app can write, and a program or interpreter inside
// such a place are refused at start, with the reason.
func TestExecPathsAreGrantedLikeExternals(t *testing.T) {
	h := newHarness(t)
	base := filepath.Dir(h.dirs.Home)
	rw := filepath.Join(h.dirs.Home, "Documents", "rw")
	if err := os.MkdirAll(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	writer := policy.App{ID: "writer", Exec: []string{"/bin/true"}, Sandbox: policy.Sandbox{Policy: policy.PolicyJail,
		External: []policy.External{{Path: "~/Documents/rw", Access: policy.AccessRW}}}}
	mk := func(p, body string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target, p string) string {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dirLink := link("/", filepath.Join(base, "root-link"))
	inRW := mk(filepath.Join(rw, "prog"), "#!/bin/sh\necho hi\n")
	interpInRW := mk(filepath.Join(base, "uses-rw-interp"), "#!"+inRW+"\n")
	planted := link("/bin/true", filepath.Join(rw, "planted"))
	viaPlanted := mk(filepath.Join(base, "via-planted"), "#!"+planted+"\n")
	viaLinkToDir := mk(filepath.Join(base, "via-dir"), "#!"+dirLink+"\n")
	goodLink := link("/bin/true", filepath.Join(base, "true-link"))
	for _, c := range []struct {
		name, prog, err string
	}{
		{"a link to a directory", dirLink, "not a regular file"},
		{"an interpreter that is a link to a directory", viaLinkToDir, "not a regular file"},
		{"a program in an app's rw place", inRW, "which a jail app may write"},
		{"an interpreter in an app's rw place", interpInRW, "which a jail app may write"},
		{"a link planted in an app's rw place", planted, "a symlink in a directory an app can write"},
		{"an interpreter through a planted link", viaPlanted, "a symlink in a directory an app can write"},
		{"a link elsewhere, to a program", goodLink, ""},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			app := h.probeApp("probe")
			app.Exec = []string{c.prog}
			spec, err := h.l.Spec(Request{App: app, Dirs: h.dirs, Neighbours: []policy.App{writer}})
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				real, _ := filepath.EvalSymlinks(c.prog)
				for _, r := range spec.Landlock.Paths {
					if r.Why == "program" && r.Path != real {
						t.Errorf("program rule %s, want the link's target %s", r.Path, real)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Spec = %v, want an error with %q", err, c.err)
			}
			if strings.Contains(c.err, "regular") && !errors.Is(err, ErrNoProgram) {
				t.Errorf("%v does not wrap ErrNoProgram", err)
			}
		})
	}
}
