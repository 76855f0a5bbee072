package testsupport

import (
	"os"
	"testing"
)

// WriteFile writes content to path with permissions perm, or fails the
// test, and returns path.
func WriteFile(t testing.TB, path, content string, perm os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	return path
}
