package jail

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"octosup/policy"
)

// What the kernel opens for execute when it runs a program, read the way
// the kernel reads it: a #! line as fs/binfmt_script.c splits it, up to
// as many script levels as fs/exec.c follows, and the ELF interpreter of
// the binary at the end. A parser that disagrees with the kernel grants
// one file and lets the kernel run another: strings.Fields split a #!
// line at "\r", so "#!DIR/L\rx" granted DIR/L (a link to /, the whole
// filesystem) while the kernel ran DIR/L\rx (a link to /bin/sh).

// binprmBufSize is BINPRM_BUF_SIZE: the kernel picks a file's format
// from its first 256 bytes, zero-padded when the file is shorter.
const binprmBufSize = 256

// maxScriptLevels is how many #! interpreters the kernel follows before
// it gives up with ELOOP (exec_binprm runs at most six handlers; the
// last must load a binary).
const maxScriptLevels = 5

// errNotScript says the head holds no #! line.
var errNotScript = errors.New("not a #! script")

// shebang is the interpreter of a #! line, as load_script finds it in
// head (the file's first binprmBufSize bytes): spaces and tabs separate,
// a newline ends the line, a NUL ends the name, and a line that fills
// the buffer without a newline must end its name (at a space, a tab or
// a NUL) within it, or the kernel refuses it (ENOEXEC) rather than run a
// truncated name. Every other byte, "\r", "\v", "\f" and the bytes of
// U+0085 and U+00A0 among them, is part of the name.
func shebang(head []byte) (string, error) {
	var buf [binprmBufSize]byte
	copy(buf[:], head)
	if buf[0] != '#' || buf[1] != '!' {
		return "", errNotScript
	}
	spacetab := func(c byte) bool { return c == ' ' || c == '\t' }
	end := bytes.IndexByte(buf[:], '\n')
	if end < 0 {
		// No newline in the buffer: the name must end before it does.
		first := 2
		for first < len(buf) && spacetab(buf[first]) {
			first++
		}
		if first == len(buf) {
			return "", errors.New("the #! line is only blanks (the kernel refuses it: ENOEXEC)")
		}
		if !bytes.ContainsAny(buf[first:], " \t\x00") {
			return "", fmt.Errorf("the #! interpreter's name runs past the first %d bytes (the kernel refuses it: ENOEXEC)", binprmBufSize)
		}
		end = len(buf) - 1
	}
	for end > 2 && spacetab(buf[end-1]) {
		end--
	}
	name := 2
	for name < end && spacetab(buf[name]) {
		name++
	}
	if name >= end {
		return "", errors.New("the #! line names no interpreter (the kernel refuses it: ENOEXEC)")
	}
	stop := name
	for stop < end && !spacetab(buf[stop]) && buf[stop] != 0 {
		stop++
	}
	if stop == name {
		// A NUL first: the kernel looks the empty name up (ENOENT).
		return "", errors.New("the #! line names no interpreter (the kernel fails it: ENOENT)")
	}
	return string(buf[name:stop]), nil
}

// interpreters lists what the kernel opens for execute besides the
// program, in the order it opens them: each #! interpreter (a script's
// may be a script itself), then the ELF interpreter (PT_INTERP) of the
// binary the chain ends at. processes: false grants execute on exactly
// these. An interpreter must be named by an absolute path: a relative
// one would be looked up from the app's working directory, its jail.
func interpreters(program string) ([]string, error) {
	var out []string
	for file := program; ; {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		head := make([]byte, binprmBufSize)
		n, _ := io.ReadFull(f, head)
		interp, err := shebang(head[:n])
		if errors.Is(err, errNotScript) {
			elfInterp, err := elfInterpreter(f, file)
			f.Close()
			if err != nil {
				return nil, err
			}
			return append(out, elfInterp...), nil
		}
		f.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: %w", file, err)
		case !filepath.IsAbs(interp):
			return nil, fmt.Errorf("%s: the #! interpreter %q is not an absolute path", file, interp)
		case len(out) == maxScriptLevels:
			return nil, fmt.Errorf("%s: more than %d levels of #! interpreters (the kernel gives up: ELOOP)", program, maxScriptLevels)
		}
		out = append(out, interp)
		file = interp
	}
}

// elfInterpreter is the PT_INTERP of the ELF file f (none for a static
// binary or a file that is no ELF: execve says what that is).
func elfInterpreter(f *os.File, name string) ([]string, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, nil
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return nil, fmt.Errorf("%s: PT_INTERP: %w", name, err)
		}
		// The kernel takes the name up to its first NUL.
		interp, _, _ := bytes.Cut(b, []byte{0})
		if !filepath.IsAbs(string(interp)) {
			return nil, fmt.Errorf("%s: PT_INTERP %q is not absolute", name, interp)
		}
		return []string{string(interp)}, nil
	}
	return nil, nil
}

// resolveExec resolves the program and its interpreters (paths, in that
// order) as they are granted: each to the real path its symlinks lead to
// (the rule grants that file, opened with RESOLVE_NO_SYMLINKS), which
// must be a regular file, reached through no symlink in a directory a
// jail app of apps may write, and lie in no such directory itself: an
// app that can write a program or an interpreter chooses what the next
// start runs and grants (its #! line, its PT_INTERP).
func resolveExec(paths []string, apps iter.Seq[policy.App], d policy.Dirs) ([]string, error) {
	writable := sync.OnceValue(func() []string { return writablePlaces(apps, d) })
	inodes := sync.OnceValue(func() map[fileID]string { return writableInodes(apps, d) })
	out := make([]string, 0, len(paths))
	for i, p := range paths {
		what := "the program"
		if i > 0 {
			what = "its interpreter"
		}
		real, link := walkGrant(filepath.Clean(p), writable)
		switch {
		case link != "":
			return nil, fmt.Errorf("%s %s leads through %s, a symlink in a directory an app can write (the app could have planted it): name the real path in the manifest, or remove the link", what, p, link)
		case real == "":
			return nil, fmt.Errorf("%w: %s %s does not resolve (missing, or a symlink loop)", ErrNoProgram, what, p)
		}
		fi, err := os.Lstat(real)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %s %s: %v", ErrNoProgram, what, p, err)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("%w: %s %s leads to %s, which is not a regular file (%s)", ErrNoProgram, what, p, real, fi.Mode().Type())
		}
		if place, ok := underWritable(real, inodes()); ok {
			return nil, fmt.Errorf("%s %s lies in %s, which a jail app may write (an rw external): an app could rewrite it and choose what the next start runs and is granted; install it outside every rw grant", what, p, place)
		}
		out = append(out, real)
	}
	return out, nil
}

// fileID is a file's identity, whatever path reaches it.
type fileID struct{ dev, ino uint64 }

// writableInodes are the directories (and files) the jail apps of apps
// may write through their rw externals, by identity, each with the path
// that grants it: a path is inside one when it or one of its parents is
// one of them, however either is spelled.
func writableInodes(apps iter.Seq[policy.App], d policy.Dirs) map[fileID]string {
	out := map[fileID]string{}
	for a := range apps {
		if a.Sandbox.Policy != policy.PolicyJail {
			continue
		}
		for _, e := range a.Sandbox.External {
			p, err := expandHome(e.Path, d.Home)
			if err != nil || e.Access != policy.AccessRW {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				out[fileID{st.Dev, st.Ino}] = p
			}
		}
	}
	return out
}

// underWritable says whether real (a path without symlinks) or one of its
// parents is in inodes, and which place it is.
func underWritable(real string, inodes map[fileID]string) (string, bool) {
	if len(inodes) == 0 {
		return "", false
	}
	for p := real; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			if place, ok := inodes[fileID{st.Dev, st.Ino}]; ok {
				return place, true
			}
		}
		if p == "/" {
			return "", false
		}
	}
}
