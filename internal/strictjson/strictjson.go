// Package strictjson checks JSON the one strict way octosup takes it from
// apps, clients and manifest files, and words what it refuses, so that
// every wire and file format has one set of limits. Its verdicts are
// jsontext's (github.com/go-json-experiment/json), which refuses what
// octosup must refuse: a name given twice in one object (also when spelled
// "a" and "\u0061"), invalid UTF-8, malformed JSON and anything after the
// value. It adds what jsontext has no option for: MaxDepth levels of
// nesting. Decoding into Go values is jsonv2's, after the check.
//
// A line's or a file's size is its format's own limit, checked before the
// bytes get here (docs/protocol.md, docs/control.md, docs/manifest.md).
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxDepth is how deep objects and arrays may nest, the outermost one
// counted: a manifest nests 6 levels, a frame's envelope and a request take
// 2 or 3 of their own, and a deeper value is a mistake or an attack on the
// reader, not data.
const MaxDepth = 32

// Kind says what is wrong with a text, for callers that word it their way.
type Kind int

const (
	// Syntax is malformed JSON (also a value cut short, see Truncated).
	Syntax Kind = iota + 1
	// Truncated is a text that ends inside its value.
	Truncated
	// Empty is a text with no value at all, only space.
	Empty
	// NotObject is a value that is not the object the caller asked for.
	NotObject
	// Duplicate is a name given twice in one object.
	Duplicate
	// TooDeep is nesting past MaxDepth.
	TooDeep
	// InvalidUTF8 is a byte sequence that is not UTF-8.
	InvalidUTF8
	// Trailing is more text after the value.
	Trailing
)

// Error is a text refused. Its message is encoding/json's wording for a
// syntax error (the wording the docs quote) and octosup's for the rest.
type Error struct {
	Kind Kind
	// Offset is the byte the problem is at: the offending character, the
	// start of the nesting past MaxDepth, of a duplicate name, of the
	// trailing text.
	Offset int64
	// Name is the duplicate name, unescaped (Kind Duplicate).
	Name string
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Member is one member of an object: its name, unescaped, and its value's
// bytes. Both alias the text they were read from (a name with an escape
// is a copy): no allocation for the usual member.
type Member struct {
	Name  []byte
	Value []byte
}

// Check reports whether data is exactly one JSON value, strictly (see the
// package comment), with space around it at most.
func Check(data []byte) error {
	_, err := read(data, false, nil)
	return err
}

// Object checks data as Check does and appends the members of the object
// it must be to dst, in the order written.
func Object(data []byte, dst []Member) ([]Member, error) {
	return read(data, true, dst)
}

// decoders keeps jsontext's decoders (a few hundred bytes of state each)
// for the next text: every hub line and request is read by one.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

type decoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

// The input is checked to be UTF-8 before jsontext reads it: what is left
// for AllowInvalidUTF8 is a \u escape of half a surrogate pair, which
// encoding/json has always taken (as U+FFFD) and so have octosup's readers.
var options = jsontext.AllowInvalidUTF8(true)

func read(data []byte, object bool, members []Member) ([]Member, error) {
	if !utf8.Valid(data) {
		return nil, &Error{Kind: InvalidUTF8, Offset: int64(invalidAt(data)), msg: "not valid UTF-8"}
	}
	start := skipSpace(data, 0)
	if start == len(data) {
		return nil, &Error{Kind: Empty, Offset: int64(start), msg: "no JSON value, only space"}
	}
	if object && data[start] != '{' {
		return nil, &Error{Kind: NotObject, Offset: int64(start), msg: "not a JSON object"}
	}
	d := decoders.Get().(*decoder)
	defer func() {
		d.buf = bytes.Buffer{} // not keep data alive
		decoders.Put(d)
	}()
	d.buf = *bytes.NewBuffer(data)
	d.dec.Reset(&d.buf, options)
	var err error
	if object {
		members, err = readObject(&d.dec, data, members)
	} else {
		_, err = readValue(&d.dec, data, 0)
	}
	if err != nil {
		return nil, err
	}
	if end := skipSpace(data, int(d.dec.InputOffset())); end != len(data) {
		return nil, &Error{Kind: Trailing, Offset: int64(end), msg: "more JSON text after the value"}
	}
	return members, nil
}

// readObject reads the object the decoder is at, the outermost level,
// member by member.
func readObject(d *jsontext.Decoder, data []byte, members []Member) ([]Member, error) {
	if _, err := d.ReadToken(); err != nil {
		return nil, wrap(err, data)
	}
	for d.PeekKind() != '}' {
		quoted, err := d.ReadValue() // a name, as written
		if err != nil {
			return nil, wrap(err, data)
		}
		name := quoted[1 : len(quoted)-1 : len(quoted)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name, _ = jsontext.AppendUnquote(nil, quoted) // checked: it unquotes
		}
		start, err := readValue(d, data, 1)
		if err != nil {
			return nil, err
		}
		end := int(d.InputOffset())
		members = append(members, Member{Name: name, Value: data[start:end:end]})
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, wrap(err, data)
	}
	return members, nil
}

// valueStart is where the value after offset i (a name's end) starts.
func valueStart(data []byte, i int) int {
	i = skipSpace(data, i)
	if i < len(data) && data[i] == ':' {
		i = skipSpace(data, i+1)
	}
	return i
}

// readValue reads the value the decoder is at, inside depth levels, and
// returns where it starts.
func readValue(d *jsontext.Decoder, data []byte, depth int) (int, error) {
	start := valueStart(data, int(d.InputOffset()))
	v, err := d.ReadValue()
	if err != nil {
		return start, wrap(err, data)
	}
	if k := v.Kind(); k == '{' || k == '[' {
		if at := tooDeep(v, depth); at >= 0 {
			return start, &Error{Kind: TooDeep, Offset: int64(start + at),
				msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
		}
	}
	return start, nil
}

// NestsTooDeep reports whether v, one valid JSON text, nests objects and
// arrays more than MaxDepth levels deep (the outermost counted), for a
// reader that checked it otherwise (jsonv2 has no depth option short of
// its own 10,000 levels).
func NestsTooDeep(v []byte) bool {
	if bytes.Count(v, []byte("{"))+bytes.Count(v, []byte("[")) <= MaxDepth {
		return false // the usual text: too few to nest that deep
	}
	return tooDeep(v, 0) >= 0
}

// tooDeep returns the offset in v, a valid JSON value inside depth
// levels, of the first '{' or '[' past MaxDepth, or -1.
func tooDeep(v []byte, depth int) int {
	inString := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > MaxDepth {
				return i
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return -1
}

// legacyWords turns jsontext's wording of a syntax error into
// encoding/json's, which docs/manifest.md and the errors clients have seen
// quote (jsontext's own v1 package does the same).
var legacyWords = strings.NewReplacer(
	"object name", "object key",
	"at start of value", "looking for beginning of value",
	"at start of string", "looking for beginning of object key string",
	"after object value", "after object key:value pair",
	"in number", "in numeric literal",
)

func wrap(err error, data []byte) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Kind: Truncated, Offset: int64(len(data)), msg: "unexpected EOF"}
	}
	var serr *jsontext.SyntacticError
	if !errors.As(err, &serr) {
		return &Error{Kind: Syntax, msg: err.Error()}
	}
	if serr.Err == jsontext.ErrDuplicateName {
		name := serr.JSONPointer.LastToken()
		return &Error{Kind: Duplicate, Offset: serr.ByteOffset, Name: name, msg: fmt.Sprintf("duplicate key %q", name)}
	}
	if PastMaxDepth(err) {
		return &Error{Kind: TooDeep, Offset: serr.ByteOffset, msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
	}
	if errors.Is(serr.Err, io.ErrUnexpectedEOF) {
		return &Error{Kind: Truncated, Offset: int64(len(data)), msg: "unexpected EOF"}
	}
	msg := serr.Err.Error()
	if i := strings.Index(msg, " (expecting"); i >= 0 && !strings.Contains(msg, " in literal") {
		msg = msg[:i]
	}
	return &Error{Kind: Syntax, Offset: serr.ByteOffset, msg: legacyWords.Replace(msg)}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// invalidAt is the offset of the first byte that is not UTF-8.
func invalidAt(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// PastMaxDepth reports whether err is jsontext's refusal of nesting past
// its own limit (10,000 levels), far past MaxDepth: the same refusal,
// though jsontext does not export it.
func PastMaxDepth(err error) bool {
	var serr *jsontext.SyntacticError
	return errors.As(err, &serr) && serr.Err.Error() == "exceeded max depth"
}
