package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"octosup/configs"
	"octosup/internal/suggest"
)

// validator holds the compiled schema and its source, whose annotations
// (x-message, x-fix, examples, properties) word the problems. It is built
// per Parse: compiling costs well under a millisecond, and no package
// state is needed.
type validator struct {
	schema *jsonschema.Schema
	source any
}

func newValidator() (*validator, error) {
	source, err := jsonschema.UnmarshalJSON(bytes.NewReader(configs.Schema()))
	if err != nil {
		return nil, fmt.Errorf("policy: read the manifest schema: %w", err)
	}
	id, _ := source.(map[string]any)["$id"].(string)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(id, source); err != nil {
		return nil, fmt.Errorf("policy: load the manifest schema: %w", err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		return nil, fmt.Errorf("policy: compile the manifest schema: %w", err)
	}
	return &validator{schema: sch, source: source}, nil
}

// schemaFindings validates doc and words each failure for people. The
// library's own messages name schema keywords; a person wants the field,
// what is wrong with it and what to write.
func (v *validator) schemaFindings(doc any) []finding {
	err := v.schema.Validate(doc)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []finding{{msg: "the schema could not check the manifest: " + err.Error(),
			fix: "report this as a bug in octosup"}}
	}
	var out []finding
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		switch e.ErrorKind.(type) {
		case *kind.PropertyNames:
			// Its causes are about the name as a string; the name is
			// the problem.
		default:
			if len(e.Causes) > 0 {
				for _, c := range e.Causes {
					walk(c)
				}
				return
			}
		}
		out = append(out, v.translate(doc, e)...)
	}
	walk(verr)
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := out[i].at.String(), out[j].at.String(); a != b {
			return a < b
		}
		return out[i].msg < out[j].msg
	})
	return out
}

var english = message.NewPrinter(language.English)

func (v *validator) translate(doc any, e *jsonschema.ValidationError) []finding {
	at := locate(doc, e.InstanceLocation)
	sub := v.subschema(e.SchemaURL)
	xmsg, _ := sub["x-message"].(string)
	fix, _ := sub["x-fix"].(string)
	if fix == "" {
		fix = "see docs/manifest.md for what this field takes"
	}
	value := valueAt(doc, at)
	subject := ""
	if len(at) == 0 {
		subject = "the manifest "
	}
	one := func(msg string) []finding {
		return []finding{{at: at, msg: subject + msg, fix: fix}}
	}
	// withValue puts a short scalar in front, so that the message shows
	// what was written: "bin/notes" must be an absolute path.
	withValue := func(msg string) []finding {
		switch value.(type) {
		case string, json.Number:
			return one(short(value) + " " + msg)
		}
		return one(msg)
	}

	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = typeName(w)
		}
		return one(fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), typeName(k.Got)))
	case *kind.Enum:
		// A name octosup knows and refuses on purpose (x11) gets the
		// reason, not a nearest neighbour that would read as a typo.
		if s, ok := value.(string); ok {
			if why, ok := annotation(sub, "x-refused", s); ok {
				if f, ok := annotation(sub, "x-refused-fix", s); ok {
					fix = f
				}
				return withValue(why)
			}
			if near := suggest.Nearest(s, enumStrings(k.Want)); near != "" {
				fix = fmt.Sprintf("write %q", near)
			}
		}
		return withValue("is not one of " + joinJSON(k.Want))
	case *kind.Const:
		return one(fmt.Sprintf("must be %s, not %s", short(k.Want), short(k.Got)))
	case *kind.Required:
		return missingFindings(at, sub, k.Missing)
	case *kind.AdditionalProperties:
		return unknownFindings(at, sub, k.Properties)
	case *kind.UniqueItems:
		first, dup := k.Duplicates[0], k.Duplicates[1]
		item := at.at(dup)
		return []finding{{at: item,
			msg: fmt.Sprintf("%s is already listed at [%d]", short(valueAt(doc, item)), first),
			fix: "remove the duplicate"}}
	case *kind.PropertyNames:
		// jsonschema v6.0.3 hands these out with an InstanceLocation
		// that shares its validator's path buffer, so by now it names
		// some other place. Only env has propertyNames; rules checks
		// env names itself.
		return nil
	case *kind.FalseSchema:
		return one("is not allowed here")
	}
	if xmsg != "" {
		return withValue(xmsg)
	}
	return withValue(e.ErrorKind.LocalizedString(english))
}

// missingFindings are the required fields missing at at, each with the
// schema's example of it as the fix when it has one.
func missingFindings(at jsonPath, sub map[string]any, missing []string) []finding {
	props, _ := sub["properties"].(map[string]any)
	var out []finding
	for _, name := range missing {
		f := finding{at: at.child(name), msg: "is missing", fix: fmt.Sprintf("add %q", name)}
		if p, ok := props[name].(map[string]any); ok {
			if ex, ok := p["examples"].([]any); ok && len(ex) > 0 {
				b, _ := json.Marshal(ex[0])
				f.fix = fmt.Sprintf("add it, e.g. %q: %s", name, b)
			}
		}
		out = append(out, f)
	}
	return out
}

// unknownFindings are the fields at at the schema does not know, each
// with the nearest known name, or the known names, as the fix.
func unknownFindings(at jsonPath, sub map[string]any, names []string) []finding {
	props, _ := sub["properties"].(map[string]any)
	known := make([]string, 0, len(props))
	for name := range props {
		known = append(known, name)
	}
	sort.Strings(known)
	var out []finding
	for _, name := range names {
		f := finding{at: at.child(name), msg: "is not a field octosup knows", unknown: true}
		if near := suggest.Nearest(name, known); near != "" {
			f.fix, f.meant = fmt.Sprintf("rename it to %q", near), near
		} else {
			f.fix = "remove it; the fields here are " + strings.Join(known, ", ")
		}
		out = append(out, f)
	}
	return out
}

// subschema is the part of the schema's source a SchemaURL points at.
func (v *validator) subschema(schemaURL string) map[string]any {
	_, frag, _ := strings.Cut(schemaURL, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	cur := v.source
	for tok := range strings.SplitSeq(strings.TrimPrefix(frag, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i := -1
			fmt.Sscan(tok, &i)
			if i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	m, _ := cur.(map[string]any)
	return m
}

func typeName(t string) string {
	switch t {
	case "object":
		return "an object"
	case "array":
		return "a list"
	case "integer":
		return "a whole number"
	case "null":
		return "null"
	case "boolean":
		return "true or false"
	}
	return "a " + t
}

// short renders a value for a message, cut to keep the line readable.
func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if r := []rune(s); len(r) > 40 {
		s = string(r[:37]) + "..."
	}
	return s
}

func joinJSON(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = short(v)
	}
	return strings.Join(parts, ", ")
}

func enumStrings(vals []any) []string {
	var out []string
	for _, v := range vals {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// annotation is the string a map-valued annotation of sub (x-refused)
// gives key.
func annotation(sub map[string]any, name, key string) (string, bool) {
	m, _ := sub[name].(map[string]any)
	v, ok := m[key].(string)
	return v, ok
}
