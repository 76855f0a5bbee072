package zookeeper

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestHistoryContract(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, servers, key)
	})
}
