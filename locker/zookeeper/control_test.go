package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestControlContract(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	lockertest.ControlContract(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, servers, key)
	})
}

func pauseRecord(version string) locker.Control {
	return locker.Control{Version: version, Pause: &locker.Pause{By: "ops@admin", Since: time.Now().UTC(), Reason: "test"}}
}

// A control record under the key changes nothing of the election: a key
// paused before anyone ran it is still never used, the candidate that
// comes first leads (with its priority in the holder record), the next one
// waits behind it, and a released key has no leader but was used.
func TestControlLeavesElectionAlone(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	key := lockertest.Key(t)
	// Written through a slot key's Locker: the record is the key's.
	v, err := newLocker(t, servers, locker.SlotKey(key, 3)).SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rawConn(t, servers, "").Get("/" + testPrefix + "/" + key + "/" + controlNode); err != nil {
		t.Fatalf("the record is not at the key's ~control: %v", err)
	}
	l := newLocker(t, servers, key)
	lockertest.NeverUsed(t, l, func() {
		first := lockertest.MustAcquire(t, newLocker(t, servers, key, func(c *Config) { c.Priority = 5 }))
		h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil || h.Epoch != first.Epoch() || h.Priority != 5 {
			t.Fatalf("Leader = %+v, %v; want epoch %d and priority 5", h, err, first.Epoch())
		}
		second := newLocker(t, servers, key)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), second)
		select {
		case r := <-ch:
			t.Fatalf("a second candidate led (%v) while the first holds the key", r.Err)
		case <-time.After(500 * time.Millisecond):
		}
		lockertest.Release(first)
		r := <-ch
		if r.Err != nil {
			t.Fatalf("the waiting candidate after the release: %v", r.Err)
		}
		lockertest.Release(r.Lease)
	}, "znode /"+testPrefix+"/"+key)
	c, err := l.Control(lockertest.Ctx(t, 5*time.Second))
	if err != nil || c.Version != v || !c.Paused() {
		t.Fatalf("the record after the election = %+v, %v; want the pause at %q", c, err, v)
	}
}

// WaitControl keeps watching across a broken connection (the client sets
// the watch again on reconnecting) and across the expiry of the Locker's
// session (it arms a new watch on the next session).
func TestWaitControlSurvivesSessionEvents(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	key := lockertest.Key(t)
	writer := newLocker(t, servers, key)
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{})
	if err != nil {
		t.Fatal(err)
	}
	w := newLocker(t, servers, key)
	for _, tc := range []struct {
		name  string
		event func(s *zkSession)
	}{
		{"connection dropped", func(s *zkSession) { s.dropConn() }},
		{"session expired", func(s *zkSession) {
			if err := zkwire.CloseSessionAny(lockertest.Ctx(t, 5*time.Second), servers, s.ID(), s.passwd, testTTL, 3*time.Second); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				c   locker.Control
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := w.WaitControl(lockertest.Ctx(t, 20*time.Second), v)
				done <- result{c, err}
			}()
			time.Sleep(300 * time.Millisecond) // the watch is armed
			s, err := w.reader.get(lockertest.Ctx(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tc.event(s)
			select {
			case r := <-done:
				t.Fatalf("WaitControl returned on a %s without a change: %+v, %v", tc.name, r.c, r.err)
			case <-time.After(time.Second):
			}
			if v, err = writer.SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(v)); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.err != nil || r.c.Version != v || !r.c.Paused() {
					t.Fatalf("WaitControl = %+v, %v; want the pause at %q", r.c, r.err, v)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("WaitControl missed a change made after a %s", tc.name)
			}
		})
	}
}

// A version this backend never gave conflicts instead of writing.
func TestSetControlForeignVersion(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	l := newLocker(t, servers, lockertest.Key(t))
	if _, err := l.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0", "v-1", "v01", "v", "42"} {
		if _, err := l.SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(v)); !errors.Is(err, locker.ErrConflict) {
			t.Errorf("SetControl at version %q: %v, want ErrConflict", v, err)
		}
	}
}

// WaitControl on a key with no record returns when one is created (an
// exists watch), and calls that end with their context leave one watch
// armed for the next, not one each.
func TestWaitControlCreationAndOneWatch(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	key := lockertest.Key(t)
	w, writer := newLocker(t, servers, key), newLocker(t, servers, key)
	var armed []<-chan zk.Event
	for range 3 {
		if _, err := w.WaitControl(lockertest.Ctx(t, 200*time.Millisecond), ""); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitControl with no record: %v, want the context's deadline", err)
		}
		w.ctlWatch.mu.Lock()
		armed = append(armed, w.ctlWatch.ch)
		w.ctlWatch.mu.Unlock()
	}
	if armed[0] == nil || armed[1] != armed[0] || armed[2] != armed[0] {
		t.Fatalf("three waits armed %v, want one watch kept", armed)
	}
	done := make(chan locker.Control, 1)
	go func() {
		c, err := w.WaitControl(lockertest.Ctx(t, 20*time.Second), "")
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	time.Sleep(300 * time.Millisecond)
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(""))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-done:
		if c.Version != v || !c.Paused() {
			t.Fatalf("WaitControl after the create = %+v; want the pause at %q", c, v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitControl missed the record's creation")
	}
}
