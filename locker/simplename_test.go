package locker

import (
	"regexp"
	"strings"
	"testing"
)

func TestSimpleNameMatchesPattern(t *testing.T) {
	for _, also := range []string{"._/-", "._:+-"} {
		re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9` + regexp.QuoteMeta(also) + `]{0,127}$`)
		cases := []string{"", "a", ".a", "a.", "-x", "a/b", "a:b", "a+b", "a b", "é", "a\x00", strings.Repeat("a", 128), strings.Repeat("a", 129), "A9_z", "_a", "a~1"}
		for _, s := range cases {
			if got, want := simpleName(s, also), re.MatchString(s); got != want {
				t.Errorf("simpleName(%q, %q) = %v, the pattern says %v", s, also, got, want)
			}
		}
	}
}
