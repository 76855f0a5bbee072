package etcd

import (
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestLockContract: the core lock contract (lockertest.LockContract) on
// a real etcd; the hand delete removes the holder's election key.
func TestLockContract(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockertest.LockContract(t, lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker {
			return newLocker(t, eps, key, func(c *Config) { c.NoWait = noWait })
		},
		Delete: func(t *testing.T, _ string, _ locker.Locker, held locker.Lease) {
			if _, err := rawClient(t, eps).Delete(lockertest.Ctx(t, 10*time.Second), held.(*lease).key); err != nil {
				t.Fatal(err)
			}
		},
	})
}
