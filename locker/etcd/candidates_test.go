package etcd

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Candidates lists the election keys after the leader's. Their values
// are the holder records every release wrote: there is no older entry.
func TestCandidates(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockertest.CandidatesContract(t, lockertest.Waiting[*Locker]{
		New: func(t *testing.T, key string, opts func(*locker.Options)) *Locker {
			return newLocker(t, eps, key, func(c *Config) { opts(&c.Options) })
		},
	})
}
