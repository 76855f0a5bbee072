//go:build linux

package local

import (
	"os"
	"testing"
)

// TestMain points the host directory, which keeps a copy of every lock's
// epoch, at a directory of the test run's own, so that the tests leave
// nothing in /var/lib/leaderrun or /var/tmp. A test that looks at it sets
// its own (privateHost).
func TestMain(m *testing.M) {
	host, err := os.MkdirTemp("", "leaderrun-host-")
	if err != nil {
		panic(err)
	}
	hostDir = func(int) string { return host }
	code := m.Run()
	_ = os.RemoveAll(host)
	os.Exit(code)
}
