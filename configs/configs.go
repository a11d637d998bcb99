// Package configs ships octosup's configuration files: the JSON Schema
// of native-apps.json (docs/manifest.md) inside the binaries, which the
// validator in package policy enforces, and beside it the example
// manifest that `make run` uses (a file: nothing reads it embedded). The
// wire formats' schemas are package configs/schema.
//
// The files themselves live next to this one so that editors and people
// can use them directly; Schema returns a fresh copy, so no caller can
// change what another one sees.
package configs

import _ "embed"

//go:embed native-apps.schema.json
var schema string

// Schema returns native-apps.schema.json, a JSON Schema (draft 2020-12).
func Schema() []byte { return []byte(schema) }
