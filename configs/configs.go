// Package configs ships octosup's configuration files inside the binaries:
// the JSON Schema of native-apps.json (docs/manifest.md), which the validator in
// package policy enforces, and the example manifest that `make run` uses.
//
// The files themselves live next to this one so that editors and people can
// use them directly; the functions return fresh copies, so no caller can
// change what another one sees.
package configs

import _ "embed"

//go:embed native-apps.schema.json
var schema string

//go:embed native-apps.example.json
var example string

// Schema returns native-apps.schema.json, a JSON Schema (draft 2020-12).
func Schema() []byte { return []byte(schema) }

// Example returns native-apps.example.json, the demo manifest.
func Example() []byte { return []byte(example) }
