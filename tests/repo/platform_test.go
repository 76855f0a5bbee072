//go:build linux

package repo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linuxOnly are the packages that use Linux system calls, or import one
// that does. Every non-test file in them is built for Linux only, so that
// `GOOS=darwin go build ./...` builds main_other.go's refusal instead of
// failing inside a package.
var linuxOnly = []string{".", "internal/cmdline", "supervise", "internal/ops", "tests/testcluster", "tests/chaos", "tests/bench"}

func TestLinuxOnlyFilesAreTagged(t *testing.T) {
	for _, dir := range linuxOnly {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "_linux.go") || filepath.Base(f) == "main_other.go" {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(src), "//go:build linux\n") && !strings.HasPrefix(string(src), "//go:build linux && ") {
				t.Errorf("%s does not start with //go:build linux (GOOS=darwin go build ./... would fail in it)", f)
			}
		}
	}
}
