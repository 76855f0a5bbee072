package consul

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestLockContract: the core lock contract (lockertest.LockContract) on
// a real Consul; the hand delete removes the key.
func TestLockContract(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{})
	lockertest.LockContract(t, lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker {
			return c.locker(t, key, c.HTTPAddr(0), func(cfg *Config) { cfg.NoWait = noWait })
		},
		Delete: func(t *testing.T, _ string, holder locker.Locker, _ locker.Lease) {
			if _, err := c.admin.KV().Delete(holder.(*Locker).path, nil); err != nil {
				t.Fatal(err)
			}
		},
	})
}
