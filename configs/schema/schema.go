// Package schema ships the JSON Schemas of octosup's wire formats
// (docs/control.md, docs/protocol.md), the files of this directory: the
// control socket's request, answer and event, and the hub's up and down
// frames. The binaries do not validate their own traffic; the tests do,
// through internal/wireschema, and other languages' clients generate
// their types from the files themselves.
package schema

import (
	"embed"
	"io/fs"
)

//go:embed *.schema.json
var files embed.FS

// Names lists the schema files, by name.
func Names() []string {
	names, _ := fs.Glob(files, "*.schema.json")
	return names
}

// File returns the schema called name, e.g. "control-request.schema.json".
func File(name string) ([]byte, error) { return files.ReadFile(name) }
