package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"octosup/internal/suggest"
)

// DecodeArgs decodes a request's args into v strictly. A member v does
// not define (names are exact: "App" is not "app") or a value of the
// wrong type is a bad_request that says where, what is wrong and what to
// send instead, naming the members there are, as the manifest validator
// does. Absent args decode as {}.
func DecodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := checkMembers(args, reflect.TypeOf(v), "args"); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return argsError(err)
	}
	return nil
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	timeType        = reflect.TypeFor[time.Time]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// checkMembers walks raw along t and refuses the first member (in the
// order of the line) that t's JSON names do not have exactly. A value of
// the wrong kind is left to the decoder, which words it (argsError).
func checkMembers(raw json.RawMessage, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType || t == timeType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	raw = bytes.TrimLeft(raw, " \t\r\n")
	switch t.Kind() {
	case reflect.Struct:
		if len(raw) == 0 || raw[0] != '{' {
			return nil
		}
		keys, values, _, err := objectMembers(raw)
		if err != nil {
			return nil
		}
		names, types := jsonFields(t)
		for i, k := range keys {
			j := slices.Index(names, k)
			if j < 0 {
				return unknownMember(path, k, names)
			}
			if err := checkMembers(values[i], types[j], path+"."+k); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if len(raw) == 0 || raw[0] != '[' {
			return nil
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := checkMembers(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// objectMembers returns the keys of the object raw starts with, in the
// order written, with their values, and the offset just past it.
func objectMembers(raw []byte) (keys []string, values []json.RawMessage, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, nil, 0, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, 0, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, 0, err
		}
		keys, values = append(keys, k), append(values, v)
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, nil, 0, err
	}
	return keys, values, int(dec.InputOffset()), nil
}

// jsonFields lists a struct's JSON member names, in declaration order,
// and their types.
func jsonFields(t reflect.Type) (names []string, types []reflect.Type) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names, types = append(names, name), append(types, f.Type)
	}
	return names, types
}

func unknownMember(path, key string, names []string) *Error {
	if len(names) == 0 {
		return Errorf(CodeBadRequest, "%s has no member %q: this op takes no args; send {} or leave args out", path, key)
	}
	list := strings.Join(names, ", ")
	if near := suggest.Nearest(key, names); near != "" {
		return Errorf(CodeBadRequest, "%s has no member %q: rename it to %q (names are exact); the members are %s", path, key, near, list)
	}
	return Errorf(CodeBadRequest, "%s has no member %q: remove it; the members are %s", path, key, list)
}

// argsError words a decoder error for the client: the member, what it
// must be and what it was.
func argsError(err error) *Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		where := "args"
		if te.Field != "" {
			where += "." + te.Field
		}
		return Errorf(CodeBadRequest, "%s must be %s, not %s", where, typeWords(te.Type), te.Value)
	}
	return Errorf(CodeBadRequest, "args: %v", err)
}

// typeWords names the JSON a Go type takes.
func typeWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return "an RFC 3339 time string"
	case t == rawMessageType:
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
