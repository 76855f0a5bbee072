package local

import (
	"os"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// TestLockContract: the core lock contract (lockertest.LockContract) on
// lock files; the hand delete removes the key's lock file.
func TestLockContract(t *testing.T) {
	dir := t.TempDir()
	lockertest.LockContract(t, lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker {
			return lockertest.Open(t, New, Config{Options: locker.Options{Key: key, Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second, NoWait: noWait}, Dir: dir})
		},
		Delete: func(t *testing.T, _ string, holder locker.Locker, _ locker.Lease) {
			if err := os.Remove(holder.(*Locker).lockPath); err != nil {
				t.Fatal(err)
			}
		},
	})
}
