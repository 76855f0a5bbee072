package kubernetes

import (
	"fmt"
	"strings"
)

// maxNameLength is the longest object name Kubernetes accepts for a Lease
// (an RFC 1123 subdomain).
const maxNameLength = 253

// LeaseName maps a prefix and a key (both valid by locker.ValidateKey) to the
// name of the Lease that holds the key's leadership:
//
//	<prefix>.<key>
//
// with each part written in lower-case letters, digits and '-' only: a
// lower-case letter (except 'z'), a digit, or a '-' that is not the part's
// last character stands for itself; every other character (upper-case
// letters, 'z', '.', '_', '/', a final '-') becomes 'z' followed by its two
// hex digits. "billing" stays "billing", "team/Job-1" becomes
// "teamz2fz4aob-1", and the default prefix gives "leaderrun.billing".
//
// The mapping is one-to-one, so two keys never share a Lease: 'z' always
// starts a three-character escape, so each part decodes to one string, and
// the parts contain no '.', so the separator is found without doubt. Every
// part starts and ends with a letter or a digit, as Kubernetes requires. A
// name longer than Kubernetes allows (253 characters) is refused rather than
// shortened, because shortening could make two keys collide.
func LeaseName(prefix, key string) (string, error) {
	name := encodePart(prefix) + "." + encodePart(key)
	if len(name) > maxNameLength {
		return "", fmt.Errorf("prefix %q and key %q map to a Lease name of %d characters; Kubernetes allows %d (upper-case letters and . _ / z take three characters each)",
			prefix, key, len(name), maxNameLength)
	}
	return name, nil
}

// encodePart writes one part of a Lease name; see LeaseName.
func encodePart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c < 'z', c >= '0' && c <= '9', c == '-' && i < len(s)-1:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "z%02x", c)
		}
	}
	return b.String()
}

// decodePart undoes encodePart; ok is false for a string encodePart cannot
// have produced.
func decodePart(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != 'z' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		var v byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02x", &v); err != nil {
			return "", false
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), true
}
