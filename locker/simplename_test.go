package locker

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

func TestSimpleNameMatchesPattern(t *testing.T) {
	for _, also := range []string{"._/-", "._:+-"} {
		re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9` + regexp.QuoteMeta(also) + `]{0,127}$`)
		cases := []string{"", "a", ".a", "a.", "-x", "a/b", "a:b", "a+b", "a b", "é", "a\x00", strings.Repeat("a", 128), strings.Repeat("a", 129), "A9_z", "_a", "a~1"}
		// And random names over an alphabet of every class the pattern
		// tells apart, at lengths around its bound.
		const alphabet = "aZ09._/-:+~ \x00\xffé"
		rng := rand.New(rand.NewPCG(1, 2))
		for range 20000 {
			b := make([]byte, rng.IntN(131))
			for i := range b {
				if rng.IntN(4) == 0 {
					b[i] = alphabet[rng.IntN(len(alphabet))]
				} else {
					b[i] = "aZ09"[rng.IntN(4)]
				}
			}
			cases = append(cases, string(b))
		}
		for _, s := range cases {
			if got, want := simpleName(s, also), re.MatchString(s); got != want {
				t.Errorf("simpleName(%q, %q) = %v, the pattern says %v", s, also, got, want)
			}
		}
	}
}
