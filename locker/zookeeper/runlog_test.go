package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestRunLogContract(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	lockertest.RunLogContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, servers, key)
	})
}

// A leader whose znode was deleted behind its back writes no record, even
// before its watch has told it so.
func TestRecordRunNeedsOwnZnode(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	l := newLocker(t, servers, lockertest.Key(t))
	ls := lockertest.MustAcquire(t, l)
	node := ls.(*lease).node
	// Keep the lease from noticing: only the write's own check stands.
	ls.(*lease).stop()
	<-ls.(*lease).watchDone
	if err := rawConn(t, servers, "").Delete(node, -1); err != nil {
		t.Fatal(err)
	}
	run := locker.NewRun(locker.Options{ID: "late"}, "s1", locker.RunSucceeded, ls.Epoch(), time.Hour)
	if err := l.RecordRun(lockertest.Ctx(t, 5*time.Second), ls, run); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("RecordRun after the znode was deleted = %v; want ErrLost", err)
	}
	if _, err := l.LookupRun(lockertest.Ctx(t, 5*time.Second), "s1"); !errors.Is(err, locker.ErrNoRun) {
		t.Fatalf("a refused record is visible: %v", err)
	}
}
