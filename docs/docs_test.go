package docs

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// outside matches what cites a document kept outside the repository: the
// shared specification, by name or by section, and the path to it. (Its
// words are split here so that this file passes its own test, and a grep.)
var outside = regexp.MustCompile(`\b` + spec + `\b|\.\./` + shared + `\b|/work/` + shared + `\b`)

const spec, shared = "SP" + "EC", "sha" + "red"

// docRef matches a file's mention of a page of docs/.
var docRef = regexp.MustCompile(`\bdocs/[a-z0-9_-]+\.md\b`)

// mdLink matches the target of a Markdown link, up to an anchor.
var mdLink = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// codeSpan matches inline code in Markdown.
var codeSpan = regexp.MustCompile("`[^`]*`")

// TestFinders: the patterns flag the citations they are for and not the
// words that merely contain its name.
func TestFinders(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"The contract is `../" + shared + "/" + spec + ".md`;", true},
		{"// in an explicit state (" + spec + " §6)", true},
		{"(" + spec + " says such fields are ignored)", true},
		{"see /work/" + shared + "/notes.md", true},
		{"sa := [2]byte{unix.AF_UN" + spec + ", 0}", false},
		{"unix.KEY_" + spec + "_SESSION_KEYRING", false},
		{"docs/spec.md says what octosup promises", false},
		{"a spec of the jail (jail.Spec)", false},
	} {
		if got := outside.MatchString(c.line); got != c.want {
			t.Errorf("%q: flagged %v, want %v", c.line, got, c.want)
		}
	}
	for _, c := range []struct {
		line, want string
	}{
		{"[the schema](../configs/native-apps.schema.json)", "../configs/native-apps.schema.json"},
		{"in [`jail.md`](jail.md#the-control-sockets-peer-check)", "jail.md"},
		{"[Limits](#limits)", ""},
		{"`errors.AsType[*policy.ValidationError](err)` is a call", "none"},
	} {
		m := mdLink.FindStringSubmatch(codeSpan.ReplaceAllString(c.line, ""))
		if c.want == "none" {
			if m != nil {
				t.Errorf("%q: link %q in code, want none", c.line, m[1])
			}
			continue
		}
		if m == nil || m[1] != c.want {
			t.Errorf("%q: link %q, want %q", c.line, m, c.want)
		}
	}
}

// TestSelfContained walks the repository: no file cites a document
// outside it, every docs/*.md that a file names exists, and every
// relative link of a Markdown file leads to a file inside the repository.
func TestSelfContained(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", ".run":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
			return nil // not text
		}
		checked++
		fenced := false
		for n, line := range strings.Split(string(data), "\n") {
			at := rel + ":" + strconv.Itoa(n+1)
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s: %q points outside the repository (%s): cite docs/*.md instead", at, m, strings.TrimSpace(line))
			}
			for _, ref := range docRef.FindAllString(line, -1) {
				if _, err := os.Stat(filepath.Join(root, ref)); err != nil {
					t.Errorf("%s: names %s, which does not exist", at, ref)
				}
			}
			if !strings.HasSuffix(path, ".md") {
				continue
			}
			// Code is not a link: fenced blocks, and `spans`.
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				to := filepath.Join(filepath.Dir(path), target)
				if r, err := filepath.Rel(root, to); err != nil || r == ".." || strings.HasPrefix(r, "../") {
					t.Errorf("%s: the link %s leads outside the repository", at, target)
				} else if _, err := os.Stat(to); err != nil {
					t.Errorf("%s: the link %s leads nowhere: %v", at, target, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files under %s: is this the repository?", checked, root)
	}
}
