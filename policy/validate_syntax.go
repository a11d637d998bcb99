package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"octosup/internal/strictjson"
)

// finding is a problem before it is attributed to an app: where, what, fix.
type finding struct {
	at  jsonPath
	msg string
	fix string
	// unknown marks a field the schema does not know, which the rules
	// must not see (see parse).
	unknown bool
	// meant is the known field an unknown one is nearest to (a typo's
	// intent): the rules leave that field alone too, as its value is
	// what the typo holds.
	meant string
}

// scanned is what the token walk learned about the document.
type scanned struct {
	// offsets maps a path (jsonPath.String) to where its value starts,
	// to put problems in the order of the file.
	offsets map[string]int64
	// findings are duplicate keys, NUL characters and numbers written as
	// fractions: what encoding/json accepts silently.
	findings []finding
	// fatal is set when the text is not one JSON value: nothing further
	// can be checked and findings holds that one problem.
	fatal bool
}

// maxDepth bounds nesting: a manifest nests 6 levels deep, and each
// level costs the walk a copy of the path. It is the limit of every JSON
// octosup reads (strictjson.MaxDepth, docs/manifest.md).
const maxDepth = strictjson.MaxDepth

// frame is an object or array the walk is inside of.
type frame struct {
	at     jsonPath
	object bool
	keys   map[string]bool // keys seen so far, for duplicates
	key    string          // the key whose value comes next
	wantKy bool            // the next token is a key (or '}')
	next   int             // the index of the next array element
}

// scan walks the tokens of data. encoding/json alone would take the last
// of two equal keys, replace invalid UTF-8 with U+FFFD and ignore what
// follows the first value; a manifest that says two things must not be
// read as one of them.
func scan(data []byte) scanned {
	s := scanned{offsets: map[string]int64{}}
	fatal := func(f finding) scanned {
		s.findings = []finding{f}
		s.fatal = true
		return s
	}
	if f, bad := unreadable(data); bad {
		return fatal(f)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*frame
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return fatal(syntaxFinding(data, off, err))
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKy {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				if s.valueDone(stack) {
					break
				}
				continue
			}
			key, _ := tok.(string) // the decoder allows only strings here
			s.key(top, key, data[off:dec.InputOffset()])
			continue
		}
		if tok == json.Delim(']') {
			stack = stack[:len(stack)-1]
			if s.valueDone(stack) {
				break
			}
			continue
		}
		at := valuePath(top)
		if _, seen := s.offsets[at.String()]; !seen {
			s.offsets[at.String()] = off
		}
		if v, ok := tok.(json.Delim); ok {
			if len(stack) == maxDepth {
				return fatal(finding{msg: where(data, off) + fmt.Sprintf("the manifest nests deeper than %d levels", maxDepth),
					fix: "check that this is the right file: a manifest nests 6 levels at most"})
			}
			f := &frame{at: at, object: v == '{'}
			if f.object {
				f.keys = map[string]bool{}
				f.wantKy = true
			}
			stack = append(stack, f)
			continue
		}
		s.scalar(at, tok, data[off:dec.InputOffset()])
		if s.valueDone(stack) {
			break
		}
	}
	if trail := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(trail) > 0 {
		// What follows is not part of the manifest; nothing in it can be
		// attributed, and checking the first value alone would hide it.
		return fatal(finding{
			msg: where(data, int64(len(data)-len(trail))) + "there is more after the manifest's closing }",
			fix: "remove it: a manifest is exactly one JSON object"})
	}
	return s
}

// unreadable is the one problem of a text that is no manifest before its
// JSON is read: too large, not UTF-8, empty.
func unreadable(data []byte) (finding, bool) {
	if len(data) > MaxManifestSize {
		return finding{
			msg: fmt.Sprintf("the manifest is larger than %d bytes", MaxManifestSize),
			fix: "check that this is the right file: a manifest of hundreds of apps stays far below the limit",
		}, true
	}
	if off := invalidUTF8(data); off >= 0 {
		return finding{msg: where(data, int64(off)) + "the file is not valid UTF-8",
			fix: "save the file as UTF-8 (an editor's encoding setting, or iconv -t UTF-8)"}, true
	}
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return finding{msg: "the manifest is empty",
			fix: `write at least {"version": 1, "apps": []}; configs/native-apps.example.json is a starting point`}, true
	}
	return finding{}, false
}

// syntaxFinding words the decoder's error at off: where and what.
func syntaxFinding(data []byte, off int64, err error) finding {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return finding{msg: where(data, int64(len(data))) + "the file ends in the middle of the manifest",
			fix: "close every open string, [ and {"}
	}
	var serr *json.SyntaxError
	if errors.As(err, &serr) {
		return finding{msg: where(data, syntaxOffset(data, serr)) + serr.Error(),
			fix: "correct the JSON there: a missing or extra comma, quote or bracket is the usual cause"}
	}
	return finding{msg: where(data, off) + err.Error(), fix: "correct the JSON there"}
}

// valuePath is the path of the value that comes next inside top (nil:
// the top-level value).
func valuePath(top *frame) jsonPath {
	switch {
	case top == nil:
		return jsonPath{}
	case top.object:
		return top.at.child(top.key)
	default:
		return top.at.at(top.next)
	}
}

// key records a key of the object top, raw as written: a second one of
// the same name is a finding.
func (s *scanned) key(top *frame, key string, raw []byte) {
	at := top.at.child(key)
	if top.keys[key] {
		s.findings = append(s.findings, finding{at: at,
			msg: fmt.Sprintf("the key %q appears twice in the same object", key),
			fix: "keep one of them: JSON readers disagree on which one counts"})
	}
	top.keys[key] = true
	top.key = key
	top.wantKy = false
	s.checkString(at, key, raw)
}

// scalar checks a string or number at at, raw as written.
func (s *scanned) scalar(at jsonPath, tok json.Token, raw []byte) {
	switch v := tok.(type) {
	case string:
		s.checkString(at, v, raw)
	case json.Number:
		// Every number in a manifest is a whole number, and
		// encoding/json refuses 443.0 or 4.43e2 for an integer field
		// although the schema, rightly, calls them integers.
		if strings.ContainsAny(string(v), ".eE") {
			fix := "write a whole number, without a fraction or an exponent"
			if n, ok := wholeNumber(string(v)); ok {
				fix = "write " + n
			}
			s.findings = append(s.findings, finding{at: at,
				msg: fmt.Sprintf("%s is not written as a whole number", v), fix: fix})
		}
	}
}

// valueDone records that a value ended inside stack's top and reports
// whether it was the top-level value.
func (s *scanned) valueDone(stack []*frame) bool {
	if len(stack) == 0 {
		return true
	}
	top := stack[len(stack)-1]
	if top.object {
		top.wantKy = true
	} else {
		top.next++
	}
	return false
}

// checkString finds what encoding/json decodes without a word: NUL, which
// no path, argument or name can hold, and \u escapes of lone UTF-16
// surrogates, which it turns into U+FFFD. raw is the string as written,
// with at most the separators before it.
func (s *scanned) checkString(at jsonPath, decoded string, raw []byte) {
	if strings.ContainsRune(decoded, 0) {
		s.findings = append(s.findings, finding{at: at, msg: `contains a NUL character (\u0000)`,
			fix: "remove it: paths, arguments and names cannot hold NUL"})
	}
	if loneSurrogate(raw) {
		s.findings = append(s.findings, finding{at: at, msg: `contains a \u escape of half a UTF-16 surrogate pair`,
			fix: "write the character itself, or both halves of the pair"})
	}
}

// loneSurrogate reports whether raw has a \uD800-\uDFFF escape that is
// not a high surrogate followed by a low one.
func loneSurrogate(raw []byte) bool {
	hex := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		return rune(n), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex(i)
		if !ok {
			i++ // another escape: skip the escaped character
			continue
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// invalidUTF8 is the offset of the first byte that is not UTF-8, or -1.
func invalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// where says "line L, column C: " for a byte offset, columns counted in
// characters as editors do.
func where(data []byte, off int64) string {
	if off < 0 {
		off = 0
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	col := utf8.RuneCount(before[start:]) + 1
	return fmt.Sprintf("line %d, column %d: ", line, col)
}

// wholeNumber is a number literal like 8e3 or 1.0 written as an integer,
// when it is one of reasonable size.
func wholeNumber(lit string) (string, bool) {
	if len(lit) > 24 {
		return "", false
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		if exp, err := strconv.Atoi(lit[i+1:]); err != nil || exp > 18 || exp < -18 {
			return "", false
		}
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok || !r.IsInt() {
		return "", false
	}
	return r.Num().String(), true
}

// syntaxOffset finds the character a *json.SyntaxError is about.
// encoding/json reports the offset of that character for errors between
// tokens (sometimes before the blanks that precede it) and the offset just
// after it for errors inside a literal; the character named in the message
// tells the two apart.
func syntaxOffset(data []byte, serr *json.SyntaxError) int64 {
	off := min(serr.Offset, int64(len(data)))
	c, ok := offendingByte(serr.Error())
	if !ok {
		return off - 1
	}
	i := off
	for i < int64(len(data)) && isJSONSpace(data[i]) {
		i++
	}
	if i < int64(len(data)) && data[i] == c {
		return i
	}
	return off - 1
}

// offendingByte reads X out of "invalid character 'X' ...", for X a
// single byte.
func offendingByte(msg string) (byte, bool) {
	rest, ok := strings.CutPrefix(msg, "invalid character '")
	if !ok {
		return 0, false
	}
	inner, _, ok := strings.Cut(rest, "' ")
	if !ok {
		return 0, false
	}
	if inner == `\'` {
		return '\'', true
	}
	if inner == `"` {
		return '"', true
	}
	s, err := strconv.Unquote(`"` + inner + `"`)
	if err != nil || len(s) != 1 {
		return 0, false
	}
	return s[0], true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
