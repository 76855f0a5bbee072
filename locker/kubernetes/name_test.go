package kubernetes

import (
	"regexp"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/locker"
)

// subdomain is Kubernetes' rule for object names (RFC 1123 subdomain).
var subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ prefix, key, want string }{
		{"leaderrun", "billing", "leaderrun.billing"},
		{"leaderrun", "team/Job-1", "leaderrun.teamz2fz4aob-1"},
		{"leaderrun", "a-", "leaderrun.az2d"},
		{"leaderrun", "a.b_c", "leaderrun.az2ebz5fc"},
		{"leaderrun", "zz", "leaderrun.z7az7a"},
		{"Ops", "9", "z4fps.9"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got, err := LeaseName(tc.prefix, tc.key)
			if err != nil || got != tc.want {
				t.Fatalf("LeaseName(%q, %q) = %q, %v; want %q", tc.prefix, tc.key, got, err, tc.want)
			}
		})
	}
}

// TestLeaseNameOneToOne maps many valid keys, including ones built to look
// alike, and checks every name is valid, decodes back, and is unique.
func TestLeaseNameOneToOne(t *testing.T) {
	alphabet := []string{"a", "z", "Z", "-", ".", "_", "/", "0", "z2f", "z2d", "A", "y"}
	keys := map[string]bool{}
	var grow func(string, int)
	grow = func(s string, depth int) {
		if locker.ValidateKey(s) == nil {
			keys[s] = true
		}
		if depth == 0 {
			return
		}
		for _, a := range alphabet {
			grow(s+a, depth-1)
		}
	}
	for _, first := range []string{"a", "Z", "z", "0"} {
		grow(first, 3)
	}
	seen := map[string]string{}
	for key := range keys {
		name, err := LeaseName("leaderrun", key)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if !subdomain.MatchString(name) {
			t.Fatalf("key %q: %q is not a valid object name", key, name)
		}
		if other, dup := seen[name]; dup {
			t.Fatalf("keys %q and %q share the Lease %q", key, other, name)
		}
		seen[name] = key
		prefix, part, _ := strings.Cut(name, ".")
		back, ok := decodePart(part)
		if p, _ := decodePart(prefix); !ok || back != key || p != "leaderrun" {
			t.Fatalf("key %q: %q decodes to %q", key, name, back)
		}
	}
	if len(seen) < 1000 {
		t.Fatalf("only %d keys tried", len(seen))
	}
}

func TestLeaseNameTooLong(t *testing.T) {
	if _, err := LeaseName("leaderrun", strings.Repeat("k", 128)); err != nil {
		t.Fatalf("a 128-character lower-case key must fit: %v", err)
	}
	if _, err := LeaseName("leaderrun", strings.Repeat("K", 128)); err == nil {
		t.Fatal("a key whose name exceeds 253 characters was accepted")
	}
}
