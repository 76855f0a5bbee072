package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Leader tells a key never used (nothing under its prefix) from one whose
// holder let go (the mark its candidate left, with no lease). A key used
// below it ("k/sub") does not make "k" used.
func TestLeaderTellsNeverUsed(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	key := lockertest.Key(t)
	sub := newLocker(t, eps, key+"/sub")
	lockertest.Release(lockertest.MustAcquire(t, sub))

	l := newLocker(t, eps, key)
	lockertest.NeverUsed(t, l, func() {
		lease := lockertest.MustAcquire(t, newLocker(t, eps, key))
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}, "/"+testPrefix+"/"+key+"/ on etcd ", eps[0])

	resp, err := cli.Get(lockertest.Ctx(t, 5*time.Second), l.usedKey())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 0 {
		t.Fatalf("the mark %s: %+v, %v; want one key with no lease", l.usedKey(), resp, err)
	}
	if keys := candidateKeys(t, cli, l); len(keys) != 0 {
		t.Fatalf("election keys left after release: %v", keys)
	}
}
