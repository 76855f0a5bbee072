package postgres

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Leader tells a key without a row (never used) from one whose holder let
// go (a release leaves the row), and names the row, table and server.
func TestLeaderTellsNeverUsed(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	l := newLocker(t, pg.DSN(), key)
	lockertest.NeverUsed(t, l, func() {
		lockertest.Release(lockertest.MustAcquire(t, newLocker(t, pg.DSN(), key)))
	}, "lrtest/"+key, "public.leaderrun_leases", "on PostgreSQL ")
}
