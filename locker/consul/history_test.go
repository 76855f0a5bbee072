package consul

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestHistoryContract(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{})
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return c.locker(t, key, c.HTTPAddr(0))
	})
}
