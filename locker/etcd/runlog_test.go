package etcd

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestRunLogContract(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockertest.RunLogContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, eps, key)
	})
}
