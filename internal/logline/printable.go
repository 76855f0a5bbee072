package logline

import (
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Printable is s as a terminal may be shown it: every rune that
// unicode.IsPrint refuses (ESC, CR, LF, TAB and the other C0 and C1
// controls, DEL, bidirectional overrides such as U+202E, zero-width and
// other format characters) and every byte that is not UTF-8 written as a
// Go escape (\x1b, \r, \n, \u202e), as the logs' text format writes them.
// Text that a record on the backend supplies (a holder's --id, a pause's
// reason, a term's end) goes through it before a table or a message shows
// it, so that no record can move the cursor, clear the screen, forge a
// line or reorder what a line says (docs/SAFETY.md).
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			writeEscape(&b, r)
		}
		i += n
	}
	return b.String()
}

const hex = "0123456789abcdef"

// writeEscape writes the Go escape of a rune that is not printable.
func writeEscape(b *strings.Builder, r rune) {
	switch r {
	case '\a':
		b.WriteString(`\a`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\v':
		b.WriteString(`\v`)
	default:
		switch {
		case r < 0x80:
			b.WriteString(`\x`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&0xf])
		case r < 0x10000:
			b.WriteString(`\u`)
			for s := 12; s >= 0; s -= 4 {
				b.WriteByte(hex[r>>uint(s)&0xf])
			}
		default:
			b.WriteString(`\U`)
			for s := 28; s >= 0; s -= 4 {
				b.WriteByte(hex[r>>uint(s)&0xf])
			}
		}
	}
}

// PrintableJSON is a JSON document (as encoding/json writes it) with every
// rune unicode.IsPrint refuses, but the newlines and spaces between its
// tokens, written as a JSON \u escape. encoding/json escapes the C0
// controls in strings, but writes DEL, the C1 controls (U+009B is a CSI to
// some terminals) and format characters such as U+202E as they are; the
// document means the same after this, and a terminal shows it as text.
// Outside strings such runes cannot occur in a document encoding/json
// wrote, so every one is inside a string, where \u is an escape.
func PrintableJSON(doc []byte) []byte {
	clean := true
	for _, r := range string(doc) {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return doc
	}
	out := make([]byte, 0, len(doc)+32)
	for _, r := range string(doc) {
		if r == '\n' || r == '\t' || unicode.IsPrint(r) {
			out = utf8.AppendRune(out, r)
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = appendU(appendU(out, r1), r2)
			continue
		}
		out = appendU(out, r)
	}
	return out
}

func appendU(out []byte, r rune) []byte {
	out = append(out, '\\', 'u')
	for s := 12; s >= 0; s -= 4 {
		out = append(out, hex[r>>uint(s)&0xf])
	}
	return out
}
