package zookeeper

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Candidates lists the candidate znodes after the leader's. Their data
// are the holder records every release wrote: there is no older entry.
func TestCandidates(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	lockertest.CandidatesContract(t, lockertest.Waiting[*Locker]{
		New: func(t *testing.T, key string, opts func(*locker.Options)) *Locker {
			return newLocker(t, servers, key, func(c *Config) { opts(&c.Options) })
		},
	})
}
