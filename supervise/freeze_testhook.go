//go:build linux && leaderrun_testhooks

package supervise

import (
	"os"
	"time"
)

// In binaries built with -tags leaderrun_testhooks (the end-to-end tests'
// build, never a release), the leader's event loop hangs while the file
// named by LEADERRUN_TEST_FREEZE_FILE exists, as if deadlocked, so tests
// can show the guard acting.
func init() {
	path := os.Getenv("LEADERRUN_TEST_FREEZE_FILE")
	if path == "" {
		return
	}
	freezeHook = func() {
		for {
			if _, err := os.Stat(path); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
