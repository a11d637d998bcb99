package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// MaxManifestSize is the largest manifest Parse and Load accept. A manifest
// of hundreds of apps stays far below it; anything bigger is the wrong file.
const MaxManifestSize = 1 << 20

// Problem is one thing wrong with a manifest, said so that a person can fix
// it without reading octosup's source.
type Problem struct {
	// App names the app the problem is in: its id when that is a valid id
	// no other app has, else "#N", its position in "apps" counting from 0.
	// It is "" for problems outside any app.
	App string
	// Field is the JSON path of the value at fault, inside the app when
	// App is set ("sandbox.tcp_connect[0]"), else from the top ("version").
	// It is "" when the problem is the app or the whole file.
	Field string
	// Message says what is wrong; Fix says what to write instead.
	Message string
	Fix     string
}

// String gives the problem on one line, e.g.
//
//	app "notes": sandbox.tcp_connect: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_connect)
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.App == "":
	case strings.HasPrefix(p.App, "#"):
		b.WriteString("app " + p.App + ": ")
	default:
		fmt.Fprintf(&b, "app %q: ", p.App)
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Message)
	if p.Fix != "" {
		b.WriteString(" (fix: " + p.Fix + ")")
	}
	return b.String()
}

// ValidationError is a manifest that cannot be used, with every problem
// found in it, in the order they appear in the file.
type ValidationError struct {
	// File is the manifest's path when it came from Load.
	File     string
	Problems []Problem
}

// Error lists the problems one per line, each prefixed by the file when
// known, the way compilers do, so that a terminal or an editor can jump
// to them.
func (e *ValidationError) Error() string {
	prefix := ""
	if e.File != "" {
		prefix = e.File + ": "
	}
	if len(e.Problems) == 0 {
		return prefix + "invalid manifest"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = prefix + p.String()
	}
	return strings.Join(lines, "\n")
}

// Parse decodes and validates a manifest: strict JSON, then the schema of
// configs/native-apps.schema.json, then the rules a schema cannot express.
// On success the defaults of docs/manifest.md are filled in and empty lists
// are nil, so that equal manifests compare equal. Paths keep "~" as written
// (see Dirs.Expand). Any problem yields a *ValidationError listing them all;
// any other error is a bug in octosup's schema.
func Parse(data []byte) (*Manifest, error) {
	v, err := newValidator()
	if err != nil {
		return nil, err
	}
	return v.parse(data)
}

// Load reads and parses the manifest at path. A file others can write is
// refused: whoever can write the manifest chooses what runs as the user.
// Problems come as a *ValidationError whose File is path; a file that
// cannot be read gives the os error (errors.Is(err, fs.ErrNotExist) works).
func Load(path string) (*Manifest, error) {
	// O_NONBLOCK so that a FIFO named by mistake is refused below instead
	// of blocking the daemon in open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &ValidationError{File: path, Problems: []Problem{{
			Message: fmt.Sprintf("is not a regular file (%s)", fi.Mode().Type()),
			Fix:     "point octosup at the native-apps.json file itself",
		}}}
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		return nil, &ValidationError{File: path, Problems: []Problem{{
			Message: fmt.Sprintf("is writable by every user (mode %04o): anyone could make octosup run their program as you", perm),
			Fix:     "chmod o-w " + path,
		}}}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := Parse(data)
	if verr, ok := errors.AsType[*ValidationError](err); ok {
		verr.File = path
		return nil, verr
	}
	return m, err
}
