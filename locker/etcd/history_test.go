package etcd

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestHistoryContract(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, eps, key)
	})
}
