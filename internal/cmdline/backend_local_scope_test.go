//go:build linux

package cmdline

import (
	"os"
	"path/filepath"
	"testing"
)

// One lock directory named through a symlink, or not yet made, is one
// scope of the sweep of leftover jobs.
func TestRealDir(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	for in, out := range map[string]string{
		real:                                     want,
		filepath.Join(dir, "link"):               want,
		filepath.Join(dir, "link") + "/":         want,
		filepath.Join(dir, "link", "a", "b"):     filepath.Join(want, "a", "b"),
		filepath.Join(dir, "real", "..", "real"): want,
	} {
		if got := realDir(in); got != out {
			t.Errorf("realDir(%q) = %q, want %q", in, got, out)
		}
	}
}
