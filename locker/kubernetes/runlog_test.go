package kubernetes

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestRunLogContract(t *testing.T) {
	srv := startServer(t)
	lockertest.RunLogContract(t, func(t *testing.T, key string) locker.Locker {
		return srv.newLocker(t, key)
	})
}
