package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"octosup/internal/strictjson"
	"octosup/internal/suggest"
)

// requestShape ends every refusal of a line's form.
const requestShape = `a request is one JSON object {"id": N, "op": "...", "args": {...}} on a line, id a positive integer`

// DecodeRequest decodes one request line (without its newline) strictly
// (docs/control.md): one JSON object with a positive integer id, a
// non-empty op, args an object when present, no other member, nothing
// after it; no name twice in any object, valid UTF-8, at most
// strictjson.MaxDepth levels deep. On error it still returns the id when
// the line is a well-formed object with a usable id and each top-level
// member once (a name twice deeper in, a byte not UTF-8, or text after
// the object keeps it), so the answer can be attributed; else ID 0, sent
// as "id": null. Args are a copy.
func DecodeRequest(line []byte) (Request, error) {
	var w struct {
		ID   int64          `json:"id"`
		Op   string         `json:"op"`
		Args jsontext.Value `json:"args"`
	}
	err := jsonv2.Unmarshal(line, &w, strictOptions(line))
	k := w.Args.Kind()
	if err != nil || w.ID <= 0 || w.Op == "" || (k != '{' && k != 'n' && k != 0) || strictjson.NestsTooDeep(line) {
		return refuse(line, err)
	}
	req := Request{ID: w.ID, Op: w.Op}
	if k == '{' {
		req.Args = json.RawMessage(w.Args)
	}
	return req, nil
}

// lenient reads a refused line's members past a name twice or a byte
// that is not UTF-8.
var lenient = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// refuse words why DecodeRequest refuses line (the first refusal, in its
// doc's order) and finds the id to answer with. strictErr is the strict
// reading's error, if any.
func refuse(line []byte, strictErr error) (Request, error) {
	var req Request
	if start := bytes.TrimLeft(line, jsonSpace); len(start) == 0 || start[0] != '{' {
		return req, fmt.Errorf("the line is not a JSON object: %s", requestShape)
	}
	var syn *jsontext.SyntacticError
	errors.As(strictErr, &syn)
	// A member twice leaves no id to answer with, whatever the strict
	// reading stopped at first: the lenient one keeps the last.
	twice, rawID := topLevel(line)
	if twice != "" {
		return req, fmt.Errorf("the request has %q twice: send each member once", twice)
	}
	if strictjson.PastMaxDepth(strictErr) {
		// Deeper than jsontext reads at all: the id counts only if
		// before the deep member.
		req.ID, _ = parseID(rawID)
		return req, fmt.Errorf("the line is not valid JSON (nested deeper than %d levels): %s", strictjson.MaxDepth, requestShape)
	}
	// Only the first value, its members as written: what follows it is
	// a refusal of its own.
	var w struct {
		ID   jsontext.Value `json:"id"`
		Op   jsontext.Value `json:"op"`
		Args jsontext.Value `json:"args"`
	}
	dec := jsontext.NewDecoder(bytes.NewReader(line), lenient)
	if err := jsonv2.UnmarshalDecode(dec, &w); err != nil {
		return req, fmt.Errorf("the line is not valid JSON (%w): %s", syntaxCause(err), requestShape)
	}
	// The id first: every later refusal can then be attributed.
	var idOK bool
	req.ID, idOK = parseID(w.ID)
	var sem *jsonv2.SemanticError
	if errors.As(strictErr, &sem) && errors.Is(sem.Err, jsonv2.ErrUnknownName) {
		name, near := sem.JSONPointer.LastToken(), ""
		if n := suggest.Nearest(name, []string{"id", "op", "args"}); n != "" {
			near = fmt.Sprintf(" (rename it to %q: names are exact)", n)
		}
		return req, fmt.Errorf("the request has no member %q%s: a request has only id, op and args", name, near)
	}
	if !idOK {
		got := "none"
		if len(w.ID) > 0 {
			got = string(w.ID)
			if len(got) > 40 {
				got = got[:40] + "…"
			}
		}
		return req, fmt.Errorf("id must be a positive integer (up to 2^63-1), got %s: this answer's id is null because the line has no id an answer could carry", got)
	}
	if len(bytes.TrimRight(line[dec.InputOffset():], jsonSpace)) > 0 {
		return req, fmt.Errorf("more than one JSON value on the line: send one request a line")
	}
	if jsonv2.Unmarshal(w.Op, &req.Op, lenient) != nil || req.Op == "" {
		return req, fmt.Errorf("op must be a non-empty string, the name of an op (the hello op lists them)")
	}
	switch k := w.Args.Kind(); k {
	case '{':
		req.Args = json.RawMessage(w.Args)
	case 'n', 0: // null or absent: no args
	default:
		return req, fmt.Errorf("args must be an object (or absent): {\"app\": \"notes\"}, not %s", kindWords(k, w.Args))
	}
	switch {
	case syn != nil && syn.Err == jsontext.ErrDuplicateName:
		return req, fmt.Errorf("%s is there twice: send each member once", strings.TrimPrefix(dotted(syn.JSONPointer), "."))
	case strictErr != nil:
		return req, fmt.Errorf("the line is not valid JSON (%w): %s", syntaxCause(strictErr), requestShape)
	}
	// All that is left is the nesting.
	return req, fmt.Errorf("the line is not valid JSON (nested deeper than %d levels): %s", strictjson.MaxDepth, requestShape)
}

const jsonSpace = " \t\r\n"

// topLevel reads the line's object leniently, as far as it is
// well-formed: the first name given twice, and the id's value when read.
// Names compare unescaped, but one with bytes not UTF-8 as written.
func topLevel(line []byte) (twice string, id jsontext.Value) {
	dec := jsontext.NewDecoder(bytes.NewReader(line), lenient)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", nil
	}
	seen := map[string]bool{}
	for dec.PeekKind() == '"' {
		raw, err := dec.ReadValue()
		if err != nil {
			return "", id
		}
		name := string(raw)
		if utf8.Valid(raw) {
			u, _ := jsontext.AppendUnquote(nil, raw) // read: it unquotes
			name = string(u)
		}
		if seen[name] {
			return name, nil
		}
		seen[name] = true
		v, err := dec.ReadValue()
		if err != nil {
			return "", id
		}
		if name == "id" {
			id = v.Clone()
		}
	}
	return "", id
}

// syntaxCause is what jsontext found wrong without its offset, as a
// refusal quotes it ("unexpected EOF").
func syntaxCause(err error) error {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return syn.Err
	}
	return err
}

// parseID is the usable id of a request's raw id member, else 0.
func parseID(raw jsontext.Value) (int64, bool) {
	if raw.Kind() == '0' {
		if id, err := strconv.ParseInt(string(raw), 10, 64); err == nil && id > 0 {
			return id, true
		}
	}
	return 0, false
}
