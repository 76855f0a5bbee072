package dynamodb

import (
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Leader tells a key without an item (never used) from one whose holder
// let go (a release leaves the item), and names the item, table and
// endpoint.
func TestLeaderTellsNeverUsed(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	l := newLocker(t, d.Endpoint(), key)
	lockertest.NeverUsed(t, l, func() {
		lockertest.Release(lockertest.MustAcquire(t, newLocker(t, d.Endpoint(), key)))
	}, "lrtest/"+key, "table "+DefaultTable, strings.TrimPrefix(d.Endpoint(), "http://"))
}
