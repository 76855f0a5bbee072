package logline

import (
	"encoding/json"
	"testing"
	"unicode"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"host-1:42", "host-1:42"},
		{"héllo wörld", "héllo wörld"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"x\r\nleader   attacker", `x\r\nleader   attacker`},
		{"tab\there", `tab\there`},
		{"evil\u202etxt.exe", `evil\u202etxt.exe`},
		{"c1\u009b31m", `c1\u009b31m`},
		{"del\x7f", `del\x7f`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"zw\u200bj", `zw\u200bj`},
		{"tag\U000E0041", `tag\U000e0041`},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPrintableJSON(t *testing.T) {
	in := map[string]string{"id": "a\x1b[2J\r\nleader   x\u202e\u009b\x7f\U000E0041"}
	doc, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := PrintableJSON(doc)
	for _, r := range string(out) {
		if r != '\n' && !unicode.IsPrint(r) {
			t.Errorf("%q left in %s", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["id"] != in["id"] {
		t.Errorf("the escaped document reads %q (%v), want %q", back["id"], err, in["id"])
	}
}
