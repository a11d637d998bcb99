package helper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// TestCannedRules: where pathRule picks go-landlock's canned rules, their
// rights are exactly ours; a go-landlock that changed them would change
// what an app may do without a line of ours changing.
func TestCannedRules(t *testing.T) {
	for _, c := range []struct {
		canned landlock.FSRule
		a      Access
		dir    bool
	}{
		{landlock.RODirs("/p"), AccessRX, true},
		{landlock.ROFiles("/p"), AccessRX, false},
	} {
		if got, want := c.canned.String(), landlock.PathAccess(landlock.AccessFSSet(fsRights(c.a, c.dir)), "/p").String(); got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

// TestLandlockRules: what each path and port of a spec becomes.
func TestLandlockRules(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pa := func(r uint64, p string) string { return landlock.PathAccess(landlock.AccessFSSet(r), p).String() }
	rw := fsRights(AccessRW, true)
	cases := []struct {
		name string
		ls   LandlockSpec
		abi  int
		want []string
		err  string
	}{
		{"dir rx is RODirs", LandlockSpec{FS: true, Paths: []PathRule{{Path: dir, Access: AccessRX}}}, 7,
			[]string{landlock.RODirs(dir).String()}, ""},
		{"file takes file rights only", LandlockSpec{FS: true, Paths: []PathRule{{Path: file, Access: AccessRW}}}, 7,
			[]string{pa(ll.AccessFSReadFile|ll.AccessFSWriteFile|ll.AccessFSTruncate, file)}, ""},
		{"read-write dir", LandlockSpec{FS: true, Paths: []PathRule{{Path: dir, Access: AccessRW}}}, 7,
			[]string{pa(rw, dir)}, ""},
		{"no refer on ABI 1", LandlockSpec{FS: true, Paths: []PathRule{{Path: dir, Access: AccessRW}}}, 1,
			[]string{pa(rw&^ll.AccessFSRefer, dir)}, ""},
		{"optional missing is skipped", LandlockSpec{FS: true, Paths: []PathRule{{Path: "/nonexistent/x", Access: AccessRO, Optional: true}}}, 7,
			nil, ""},
		{"required missing fails", LandlockSpec{FS: true, Paths: []PathRule{{Path: "/nonexistent/x", Access: AccessRO}}}, 7,
			nil, "landlock: open /nonexistent/x: ENOENT"},
		{"broad has no path rules", LandlockSpec{Paths: []PathRule{{Path: dir, Access: AccessRW}}, Net: true}, 7,
			nil, ""},
		{"ports", LandlockSpec{Net: true, ConnectTCP: []uint16{443}, BindTCP: []uint16{8080}}, 7,
			[]string{landlock.ConnectTCP(443).String(), landlock.BindTCP(8080).String()}, ""},
		{"no port rules unless net", LandlockSpec{ConnectTCP: []uint16{443}}, 7, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules, fds, lerr := landlockRules(c.ls, c.abi)
			closeAll(fds)
			if c.err != "" {
				if lerr == nil || lerr.Error() != c.err {
					t.Fatalf("error %v, want %q", lerr, c.err)
				}
				return
			}
			if lerr != nil {
				t.Fatal(lerr)
			}
			var got []string
			for _, r := range rules {
				got = append(got, fmt.Sprint(r))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("rules\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestBuildRuleset: NewRulesetFD's -1 (nothing to enforce) is never taken
// for a layer; a spec that asks for something gets a real ruleset.
func TestBuildRuleset(t *testing.T) {
	abi := LandlockABI()
	if abi < 1 {
		t.Skip("no Landlock in this kernel")
	}
	for _, c := range []struct {
		name   string
		ls     LandlockSpec
		abi    int
		wantFD bool
	}{
		{"nothing asked", LandlockSpec{}, abi, false},
		{"no landlock", LandlockSpec{FS: true, Scope: true}, 0, false},
		{"files", LandlockSpec{FS: true, Paths: []PathRule{{Path: "/usr", Access: AccessRX}}}, abi, true},
		{"scope only", LandlockSpec{Scope: true}, abi, abi >= 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			fd, _, lerr := BuildRuleset(c.ls, c.abi)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if fd >= 0 {
				defer unix.Close(fd)
				flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
				if err != nil || flags&unix.FD_CLOEXEC == 0 {
					t.Errorf("ruleset fd flags %#x, %v: want close-on-exec", flags, err)
				}
			}
			if (fd >= 0) != c.wantFD {
				t.Errorf("fd %d, want a ruleset: %v", fd, c.wantFD)
			}
		})
	}
}

// TestOpenRuleRefusesLinks: an external's or a resource's path is
// resolved before the rule is built, so a symlink in any of its
// components is a swap made since: refused, not only in the last
// component (os.Lstat's view, which let a swapped parent through). A
// real path is opened once, and go-landlock gets that descriptor.
func TestOpenRuleRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"real/sub", "elsewhere/sub"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, why string
		refused         bool
	}{
		{"a real external", "real/sub", "external", false},
		{"a link as the last component", "link", "external", true},
		{"a link above it", "link/sub", "external", true},
		{"a resource below a link", "link/sub", "resource", true},
		{"a system path may lead through links", "link/sub", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, fd, isDir, err := openRule(PathRule{Path: filepath.Join(dir, c.path), Why: c.why, Access: AccessRO})
			if fd >= 0 {
				defer unix.Close(fd)
			}
			if c.refused {
				if !errors.Is(err, unix.ELOOP) {
					t.Fatalf("openRule: %q %v, want ELOOP", path, err)
				}
				return
			}
			if err != nil || !isDir {
				t.Fatalf("openRule: %q dir=%v %v", path, isDir, err)
			}
			var a, b unix.Stat_t
			if err := unix.Stat(path, &a); err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(filepath.Join(dir, c.path), &b); err != nil {
				t.Fatal(err)
			}
			if a.Ino != b.Ino || a.Dev != b.Dev {
				t.Errorf("the rule's path %s is not the file checked", path)
			}
		})
	}
}
