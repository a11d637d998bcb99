package visible

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String renders s for a person's terminal. Much of what a control
// client shows a person comes from apps, which are hostile by assumption
// (their output, failure reasons, tool names and args, error messages),
// or from the manifest (argv, env): printed raw, an ESC or CR in it would
// reach the terminal, which could retitle the window, erase the line or
// move the cursor, and a newline or a bidi override could make one app's
// text read as another line, or as another app's. String shows every such
// character as an escape instead, so that what the person reads is the
// text, one line, in the order it was written:
//
//   - a backslash is doubled (\\), so that an escape below cannot be
//     forged by text that spells one out;
//   - newline, CR and tab are \n, \r and \t; tab too, because a tab would
//     start a new column in a table (text/tabwriter) and is never needed
//     to read a line;
//   - every other C0 control, and DEL, is \xNN (ESC is \x1b);
//   - a byte that is not UTF-8 is \xNN;
//   - a rune that is not printable by strconv.IsPrint (C1 controls, the
//     bidi embeddings, overrides and isolates of "Trojan Source", zero
//     width and other format characters, line and paragraph separators,
//     spaces other than ASCII space, private use, unassigned) or that is
//     an invisible filler (unicode.Other_Default_Ignorable_Code_Point,
//     e.g. U+3164) is \uNNNN, or \UNNNNNNNN above U+FFFF.
//
// Everything else, letters and symbols of any script included, is kept.
// The result is the body of a Go string literal whose double quotes are
// not escaped, so it maps back to s (strconv.Unquote after escaping the
// quotes): no two texts render alike.
//
// JSON output is not rendered: its escaping is already unambiguous, and
// scripts get the exact text.
func String(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < utf8.RuneSelf && s[i] != 0x7f && s[i] != '\\' {
		i++
	}
	if i == len(s) {
		return s // the common case: printable ASCII only
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for rest := s[i:]; rest != ""; {
		r, size := utf8.DecodeRuneInString(rest)
		switch {
		case r == utf8.RuneError && size == 1:
			hexByte(&b, rest[0])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			hexByte(&b, byte(r))
		case strconv.IsPrint(r) && !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r):
			b.WriteString(rest[:size])
		case r <= 0xffff:
			b.WriteString(`\u`)
			hexN(&b, uint32(r), 4)
		default:
			b.WriteString(`\U`)
			hexN(&b, uint32(r), 8)
		}
		rest = rest[size:]
	}
	return b.String()
}

const hexDigits = "0123456789abcdef"

func hexByte(b *strings.Builder, c byte) {
	b.WriteString(`\x`)
	hexN(b, uint32(c), 2)
}

func hexN(b *strings.Builder, v uint32, n int) {
	for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[v>>shift&0xf])
	}
}
