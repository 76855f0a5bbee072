package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestControlContract(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockertest.ControlContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, eps, key)
	})
}

// The control record lies where no scan of the key's other keys miscounts
// it: a key with nothing but a control record is still never used (Leader
// names the prefix), candidates of the key and of its slot keys still win
// and hand over after control writes, and a key used once is "no leader"
// as before.
func TestControlLeavesTheKeyAlone(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	key := lockertest.Key(t)
	writer := newLocker(t, eps, locker.SlotKey(key, 2))
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Pause: &locker.Pause{By: "ops@admin1", Reason: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "/" + testPrefix + "/" + key + "/~control"
	if resp, err := cli.Get(lockertest.Ctx(t, 5*time.Second), want); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 0 {
		t.Fatalf("the control record of %s: %+v, %v; want one key %s with no lease", locker.SlotKey(key, 2), resp, err, want)
	}

	l := newLocker(t, eps, key)
	lockertest.NeverUsed(t, l, func() {
		a := newLocker(t, eps, key)
		b := newLocker(t, eps, key)
		first := lockertest.MustAcquire(t, a)
		if keys := candidateKeys(t, cli, a); len(keys) != 1 {
			t.Fatalf("election keys of %s: %v; want the holder's alone", key, keys)
		}
		next := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), b)
		testsupport.WaitFor(t, 5*time.Second, "the second candidate waits", func() bool {
			return len(candidateKeys(t, cli, a)) == 2
		})
		var err error
		if v, err = writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Version: v}); err != nil {
			t.Fatal(err)
		}
		if h, err := l.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil || h.Epoch != first.Epoch() {
			t.Fatalf("Leader after a control write = %+v, %v; want epoch %d", h, err, first.Epoch())
		}
		lockertest.Release(first)
		r := <-next
		if r.Err != nil {
			t.Fatalf("the waiting candidate after a control write: %v", r.Err)
		}
		lockertest.Release(r.Lease)
		slot := lockertest.MustAcquire(t, newLocker(t, eps, locker.SlotKey(key, 2)))
		lockertest.Release(slot)
	}, "/"+testPrefix+"/"+key+"/ on etcd ")
}

// WaitControl rides out a lost quorum on the one member it talks to: the
// watch ends (the member has no leader), reads fail until the quorum is
// back, and the write made then still reaches the waiter.
func TestControlSurvivesQuorumLoss(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	key := lockertest.Key(t)
	writer := newLocker(t, e.Endpoints(), key)
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := newLocker(t, []string{e.Member(0)}, key)
	type result struct {
		c   locker.Control
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := waiter.WaitControl(lockertest.Ctx(t, time.Minute), v)
		done <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter watches
	e.Stop(1)
	e.Stop(2)
	select {
	case r := <-done:
		t.Fatalf("WaitControl returned without a write, while the quorum was lost: %+v, %v", r.c, r.err)
	case <-time.After(3 * time.Second):
	}
	e.Restart(1)
	e.Restart(2)
	e.WaitHealthy(t)
	rec := locker.Control{Version: v, Pause: &locker.Pause{By: "ops@admin1", Reason: "after the outage"}}
	v2, err := writer.SetControl(lockertest.Ctx(t, 10*time.Second), rec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.c.Version != v2 || r.c.Pause == nil || r.c.Pause.Reason != "after the outage" {
			t.Fatalf("WaitControl after the outage = %+v, %v; want the record at %s", r.c, r.err, v2)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitControl missed the write made after the quorum came back")
	}
	// A closed Locker ends a wait with an error, not a hang.
	closed := newLocker(t, []string{e.Member(0)}, key)
	closed.Close()
	if _, err := closed.WaitControl(lockertest.Ctx(t, 5*time.Second), v2); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitControl on a closed Locker: %v, want its error at once", err)
	}
}
