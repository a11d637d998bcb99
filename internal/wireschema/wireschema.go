// Package wireschema validates lines of octosup's wire formats against
// the JSON Schemas of configs/schema: the control socket's requests,
// answers (each op's data too) and events, and the hub's frames both
// ways. The tests of the daemon and of the golden files use it, so that
// the docs, the schemas and the daemon cannot drift apart.
package wireschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"octosup/configs/schema"
)

// base is the $id prefix every schema of configs/schema shares.
const base = "https://octosup.invalid/"

// NoData are the ops whose ok answer has no data.
var NoData = []string{"app.send", "request.reply", "request.event"}

// Schemas holds the compiled schemas.
type Schemas struct {
	request, answer, event, up, down *jsonschema.Schema
	data                             map[string]*jsonschema.Schema // each op's answer data
	args                             map[string]*jsonschema.Schema // each op's args
}

// Load compiles every schema of configs/schema.
func Load() (*Schemas, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	var answer, request map[string]any
	for _, name := range schema.Names() {
		b, err := schema.File(name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("configs/schema/%s: %w", name, err)
		}
		if err := c.AddResource(base+name, doc); err != nil {
			return nil, fmt.Errorf("configs/schema/%s: %w", name, err)
		}
		switch name {
		case "control-answer.schema.json":
			answer, _ = doc.(map[string]any)
		case "control-request.schema.json":
			request, _ = doc.(map[string]any)
		}
	}
	s := &Schemas{data: map[string]*jsonschema.Schema{}, args: map[string]*jsonschema.Schema{}}
	for _, x := range []struct {
		to   **jsonschema.Schema
		name string
	}{{&s.request, "control-request"}, {&s.answer, "control-answer"}, {&s.event, "control-event"}, {&s.up, "hub-up"}, {&s.down, "hub-down"}} {
		sch, err := c.Compile(base + x.name + ".schema.json")
		if err != nil {
			return nil, fmt.Errorf("compile configs/schema/%s.schema.json: %w", x.name, err)
		}
		*x.to = sch
	}
	for _, x := range []struct {
		doc  map[string]any
		name string
		def  string
		into map[string]*jsonschema.Schema
	}{{answer, "control-answer", "data", s.data}, {request, "control-request", "args", s.args}} {
		// Each op's is $defs["data.<op>"] (or "args.<op>"): one
		// definition each, which generators turn into a type each.
		defs, _ := x.doc["$defs"].(map[string]any)
		for key := range defs {
			op, ok := strings.CutPrefix(key, x.def+".")
			if !ok {
				continue
			}
			sch, err := c.Compile(base + x.name + ".schema.json#/$defs/" + key)
			if err != nil {
				return nil, fmt.Errorf("compile the %s of %s: %w", x.def, op, err)
			}
			x.into[op] = sch
		}
	}
	return s, nil
}

// Ops are the ops whose answer data the schemas define, and those without
// data.
func (s *Schemas) Ops() []string {
	out := slices.Clone(NoData)
	for op := range s.data {
		out = append(out, op)
	}
	slices.Sort(out)
	return out
}

func validate(sch *jsonschema.Schema, line []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

// Request validates a request line. A request of a known op whose args
// do not fit is reported against that op's args alone, which says more
// than every branch of the schema's oneOf.
func (s *Schemas) Request(line []byte) error {
	err := validate(s.request, line)
	if err == nil {
		return nil
	}
	var r struct {
		Op   string          `json:"op"`
		Args json.RawMessage `json:"args"`
	}
	if json.Unmarshal(line, &r) == nil && s.args[r.Op] != nil && r.Args != nil {
		if aerr := validate(s.args[r.Op], r.Args); aerr != nil {
			return fmt.Errorf("the args of %s: %w", r.Op, aerr)
		}
	}
	return err
}

// Event validates an event line.
func (s *Schemas) Event(line []byte) error { return validate(s.event, line) }

// Up validates a line an app writes on its hub.
func (s *Schemas) Up(line []byte) error { return validate(s.up, line) }

// Down validates a line the daemon writes on an app's hub.
func (s *Schemas) Down(line []byte) error { return validate(s.down, line) }

// Answer validates the answer to a request of op ("" when the line
// answers none): the envelope, then an ok answer's data against the op's.
func (s *Schemas) Answer(op string, line []byte) error {
	if err := validate(s.answer, line); err != nil {
		return err
	}
	var a struct {
		OK   bool            `json:"ok"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(line, &a); err != nil || !a.OK || op == "" {
		return err
	}
	if slices.Contains(NoData, op) {
		if a.Data != nil {
			return fmt.Errorf("%s answers without data, got %s", op, a.Data)
		}
		return nil
	}
	sch := s.data[op]
	if sch == nil {
		return fmt.Errorf("the answer schema has no data for op %q", op)
	}
	if a.Data == nil {
		return fmt.Errorf("%s answers with data, got none", op)
	}
	return validate(sch, a.Data)
}
