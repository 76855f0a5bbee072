//go:build leaderrun_attack

package e2e

import (
	"os"
	"testing"
)

// Left open (run with -tags leaderrun_attack): one registry entry of a
// live job removed (an operator cleaning the entries the docs say stay
// behind, or a cleaner of old files under /tmp/leaderrun-UID, where a
// user's registry lives, aging the entry of a job that has run for
// days), then its leaderrun and guard killed together. The standby's
// re-check finds neither the entry nor a changed directory, and its child
// starts beside the leftover.
func TestLeftoverSweptAfterItsRegistryEntryWasRemoved(t *testing.T) {
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		if err := os.Remove(entry); err != nil {
			t.Fatal(err)
		}
	})
}
