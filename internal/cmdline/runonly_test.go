//go:build linux

package cmdline

import (
	"slices"
	"testing"
)

// TestRunOnlyNamesItsOwnOptions: a backend's RunOnly names options it has,
// so that a misspelt name cannot leave one listed by status and check.
func TestRunOnlyNamesItsOwnOptions(t *testing.T) {
	for _, b := range backends {
		var names []string
		for _, f := range b.Flags() {
			names = append(names, f.Names()[0])
		}
		for _, n := range b.RunOnly {
			if !slices.Contains(names, n) {
				t.Errorf("backend %s: RunOnly names --%s, which is not one of its options %q", b.Name, n, names)
			}
		}
	}
}
