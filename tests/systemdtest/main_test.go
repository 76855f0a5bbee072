package systemdtest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if unpacked.dir != "" {
		_ = os.RemoveAll(unpacked.dir)
	}
	os.Exit(code)
}
