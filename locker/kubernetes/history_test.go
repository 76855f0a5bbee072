package kubernetes

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestHistoryContract(t *testing.T) {
	srv := startServer(t)
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return srv.newLocker(t, key)
	})
}
