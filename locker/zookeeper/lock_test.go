package zookeeper

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestLockContract: the core lock contract (lockertest.LockContract) on
// a real ZooKeeper; the hand delete removes the key's candidate znodes,
// as an operator cleaning up would.
func TestLockContract(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	lockertest.LockContract(t, lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker {
			return newLocker(t, servers, key, func(c *Config) { c.NoWait = noWait })
		},
		Delete: func(t *testing.T, _ string, holder locker.Locker, _ locker.Lease) {
			c := rawConn(t, servers, "")
			dir := holder.(*Locker).dir
			names, _, err := c.Children(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range candidates(names) {
				if err := c.Delete(dir+"/"+n, -1); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}
