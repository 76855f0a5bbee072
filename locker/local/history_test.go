//go:build linux

package local

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestHistoryContract(t *testing.T) {
	dir := t.TempDir()
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		l := newLockerKey(t, dir, key)
		t.Cleanup(func() { l.Close() })
		return l
	})
}
