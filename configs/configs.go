// Package configs ships octosup's configuration files inside the binaries:
// the JSON Schema of native-apps.json (docs/manifest.md), which the validator in
// package policy enforces, and the example manifest that `make run` uses.
//
// The files themselves live next to this one so that editors and people can
// use them directly; the functions return fresh copies, so no caller can
// change what another one sees.
package configs

import (
	"embed"
	"io/fs"
)

//go:embed native-apps.schema.json
var schema string

//go:embed native-apps.example.json
var example string

// The wire formats' schemas (docs/control.md, docs/protocol.md): the
// control socket's request, answer and event, the hub's up and down
// frames.
//
//go:embed schema/*.schema.json
var wire embed.FS

// WireSchemas lists the files of configs/schema, by name.
func WireSchemas() []string {
	names, _ := fs.Glob(wire, "schema/*.schema.json")
	for i, n := range names {
		names[i] = n[len("schema/"):]
	}
	return names
}

// WireSchema returns configs/schema/name, e.g. "control-request.schema.json".
func WireSchema(name string) ([]byte, error) { return wire.ReadFile("schema/" + name) }

// Schema returns native-apps.schema.json, a JSON Schema (draft 2020-12).
func Schema() []byte { return []byte(schema) }

// Example returns native-apps.example.json, the demo manifest.
func Example() []byte { return []byte(example) }
