package zookeeper

import (
	"context"
	"testing"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Leader tells a key never used (no znode) from one whose holder let go
// (its persistent znode stays, its candidate gone). A znode made only as
// the parent of another key ("k" for "k/sub") is not a use of "k"; once
// "k" itself is used, it counts although "k/sub" is still below it.
func TestLeaderTellsNeverUsed(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	key := lockertest.Key(t)
	lockertest.Release(lockertest.MustAcquire(t, newLocker(t, servers, key+"/sub")))

	l := newLocker(t, servers, key)
	lockertest.NeverUsed(t, l, func() {
		lease := lockertest.MustAcquire(t, newLocker(t, servers, key))
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}, "znode /"+testPrefix+"/"+key+" on ZooKeeper ", servers[0])
}
