package visible

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"plain", "hello from talker", "hello from talker"},
		{"other scripts stay", "café 日本語 Ünïcödé 😀 ←", "café 日本語 Ünïcödé 😀 ←"},
		{"replacement char stays", "a\uFFFDb", "a\uFFFDb"},
		{"combining mark stays", "e\u0301", "e\u0301"},
		{"OSC title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"line erase", "\x1b[2K", `\x1b[2K`},
		{"CR", "safe\rforged", `safe\rforged`},
		{"newline", "one\n[otherapp] forged", `one\n[otherapp] forged`},
		{"tab", "a\tb", `a\tb`},
		{"other C0", "\x00\x08\x0b\x0c\x1f", `\x00\x08\x0b\x0c\x1f`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 as runes", "\u0085\u009b2J", `\u0085\u009b2J`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"a lone C1 byte", "\x9b2J", `\x9b2J`},
		{"backslash", `C:\dir`, `C:\\dir`},
		{"spelled-out escape", `\x1b[2K`, `\\x1b[2K`},
		{"spelled-out unicode escape", `\u202e`, `\\u202e`},
		{"bidi override", "abc\u202Edcba", `abc\u202edcba`},
		{"bidi embeddings and pop", "\u202A\u202B\u202C\u202D", `\u202a\u202b\u202c\u202d`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"bidi marks", "\u200E\u200F\u061C", `\u200e\u200f\u061c`},
		{"zero width", "a\u200Bb\u200Cc\u200Dd\u2060e\uFEFF", `a\u200bb\u200cc\u200dd\u2060e\ufeff`},
		{"soft hyphen", "ad\u00ADmin", `ad\u00admin`},
		{"line and paragraph separators", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"look-alike spaces", "a\u00A0b\u3000c", `a\u00a0b\u3000c`},
		{"invisible filler", "a\u3164b", `a\u3164b`},
		{"tag characters", "\U000E0041", `\U000e0041`},
		{"private use", "\uE000", `\ue000`},
		{"double quotes stay", `say "hi"`, `say "hi"`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("%s: String(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// unvisible inverts Visible: its output is a Go string literal's body
// with the double quotes left as they are.
func unvisible(v string) (string, error) {
	return strconv.Unquote(`"` + strings.ReplaceAll(v, `"`, `\"`) + `"`)
}

func FuzzString(f *testing.F) {
	for _, s := range []string{
		"", "plain", "\x1b]0;pwned\x07", "a\rb", "\x1b[2K", "x\n[otherapp] y",
		"\t", "\x7f", "\u0085", "\xff\xfe", `\x1b`, `\\`, `"`, "\u202e\u2066",
		"\u200b\ufeff", "\u3164", "\U000e0041", "日本\u0301", "\xc3", "\xed\xa0\x80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := String(s)
		if !utf8.ValidString(v) {
			t.Fatalf("String(%q) = %q is not UTF-8", s, v)
		}
		for _, r := range v {
			switch {
			case r < 0x20 || r == 0x7f:
				t.Fatalf("String(%q) = %q holds control %U", s, v, r)
			case r >= 0x80 && r <= 0x9f:
				t.Fatalf("String(%q) = %q holds C1 control %U", s, v, r)
			case unicode.Is(unicode.Bidi_Control, r):
				t.Fatalf("String(%q) = %q holds bidi control %U", s, v, r)
			case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Other_Default_Ignorable_Code_Point):
				t.Fatalf("String(%q) = %q holds invisible %U", s, v, r)
			}
		}
		// Injective: the rendering maps back to s, so no text renders
		// like another, and none like another prefixed by a line break.
		back, err := unvisible(v)
		if err != nil || back != s {
			t.Fatalf("String(%q) = %q maps back to %q (%v)", s, v, back, err)
		}
		// Plain text is left alone.
		if v == s && strings.ContainsAny(s, "\\\n\r\t\x1b") {
			t.Fatalf("String(%q) kept it as is", s)
		}
	})
}
