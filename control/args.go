package control

import (
	"cmp"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/internal/suggest"
)

// DecodeArgs decodes a request's args into v strictly (json/v2: names
// exact, no member v does not define, none twice). A refusal is a
// bad_request saying where, what is wrong and what to send instead,
// naming the members there are. Absent args decode as {}.
func DecodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	err := jsonv2.Unmarshal(args, v, strictOptions(args))
	if err == nil {
		return nil
	}
	var sem *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &sem) && errors.Is(sem.Err, jsonv2.ErrUnknownName):
		// GoType is the struct the member is unknown to.
		path, key, names := "args"+dotted(sem.JSONPointer.Parent()), sem.JSONPointer.LastToken(), jsonFields(sem.GoType)
		if len(names) == 0 {
			return Errorf(CodeBadRequest, "%s has no member %q: this op takes no args; send {} or leave args out", path, key)
		}
		list := strings.Join(names, ", ")
		if near := suggest.Nearest(key, names); near != "" {
			return Errorf(CodeBadRequest, "%s has no member %q: rename it to %q (names are exact); the members are %s", path, key, near, list)
		}
		return Errorf(CodeBadRequest, "%s has no member %q: remove it; the members are %s", path, key, list)
	case errors.As(err, &sem):
		return Errorf(CodeBadRequest, "args%s must be %s, not %s", dotted(sem.JSONPointer), typeWords(sem.GoType), kindWords(sem.JSONKind, sem.JSONValue))
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		return Errorf(CodeBadRequest, "args%s is there twice: send each member once", dotted(syn.JSONPointer))
	case errors.As(err, &syn):
		return Errorf(CodeBadRequest, "args%s: %v", dotted(syn.JSONPointer), syn.Err)
	}
	return Errorf(CodeBadRequest, "args: %v", err)
}

// dotted is a JSON pointer as a path below args: /call/confirm is
// .call.confirm, /topics/1 is .topics[1].
func dotted(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
		} else {
			b.WriteString("." + tok)
		}
	}
	return b.String()
}

// jsonFields lists a struct's JSON member names in declaration order.
func jsonFields(t reflect.Type) (names []string) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); f.IsExported() && name != "-" {
			names = append(names, cmp.Or(name, f.Name))
		}
	}
	return names
}

// kindWords names the JSON value sent: its kind, and a number's text (a
// fraction where an integer goes says which).
func kindWords(k jsontext.Kind, v jsontext.Value) string {
	switch k {
	case '"':
		return "string"
	case '0':
		if len(v) > 0 {
			return "number " + string(v)
		}
		return "number"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "that value"
}

// typeWords names the JSON a Go type takes.
func typeWords(t reflect.Type) string {
	if t == nil {
		return "something else"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[time.Time]():
		return "an RFC 3339 time string"
	case reflect.TypeFor[json.RawMessage]():
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(typeWords(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// strictOptions reads data strictly: no member a Go type does not name.
// A \u escape of half a surrogate pair is taken (as U+FFFD) when data is
// otherwise UTF-8, as encoding/json and the hub take it
// (docs/protocol.md), so a value an app wrote reaches the kernel and back.
func strictOptions(data []byte) jsonv2.Options {
	return jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsontext.AllowInvalidUTF8(utf8.Valid(data)))
}
