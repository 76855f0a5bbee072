package zookeeper

import (
	"errors"
	"path"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// lateTTL outlives the windows of the late-candidate tests by far: a
// candidate that leads within lateWithin did not wait it out.
const (
	lateTTL    = 30 * time.Second
	lateWithin = 20 * time.Second
)

// lateSetup starts an ensemble that grants sessions of lateTTL, and a
// holder of a fresh key whose znode is then deleted by hand: every znode
// under the key starting with '@', as an operator cleaning up would.
func lateSetup(t *testing.T) (servers []string, key string, a *Locker, held locker.Lease) {
	t.Helper()
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 2 * lateTTL})
	servers = z.Addrs()
	key = lockertest.Key(t)
	a = newLocker(t, servers, key, func(c *Config) { c.TTL = lateTTL })
	held = lockertest.MustAcquire(t, a)
	c := rawConn(t, servers, "")
	names, _, err := c.Children(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range candidates(names) {
		if err := c.Delete(a.dir+"/"+n, -1); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "the holder sees its znode gone", func() bool { return testsupport.IsClosed(held.Lost()) })
	return servers, key, a, held
}

// lateCandidate starts a candidate for key after the hand delete, and
// checks that it does not lead while the holder's session lives.
func lateCandidate(t *testing.T, servers []string, key string) <-chan lockertest.Acquired {
	t.Helper()
	ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 2*lateTTL), newLocker(t, servers, key, func(c *Config) { c.TTL = lateTTL }))
	select {
	case r := <-ch:
		t.Fatalf("the late candidate's Acquire returned (%v) while the holder's session lives", r.Err)
	case <-time.After(3 * time.Second):
	}
	return ch
}

// awaitLed waits for the late candidate to lead, well before the
// holder's TTL could have passed: only the holder's release frees it.
func awaitLed(t *testing.T, ch <-chan lockertest.Acquired, held locker.Lease) {
	t.Helper()
	select {
	case r := <-ch:
		if r.Err != nil {
			t.Fatalf("the late candidate's Acquire after the holder's release: %v", r.Err)
		}
		if r.Lease.Epoch() <= held.Epoch() {
			t.Errorf("epoch %d after %d, want strictly greater", r.Lease.Epoch(), held.Epoch())
		}
	case <-time.After(lateWithin):
		t.Fatalf("the late candidate did not lead within %v of the holder's release", lateWithin)
	}
}

// TestHandDeleteLateCandidate: the holder's znode deleted by hand, then a
// candidate that starts only after the delete: it has never seen the
// holder's znode, and learns of the holder from the last-winner record
// (lastHolder). It leads once the holder releases, by its own Release or
// by the guard's (ReleaseHandle, which names the znode in the release
// record but leaves the last-winner record as it is).
func TestHandDeleteLateCandidate(t *testing.T) {
	t.Run("the holder releases", func(t *testing.T) {
		servers, key, _, held := lateSetup(t)
		ch := lateCandidate(t, servers, key)
		if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		awaitLed(t, ch, held)
	})
	t.Run("--no-wait", func(t *testing.T) {
		servers, key, _, held := lateSetup(t)
		defer lockertest.Release(held)
		l := newLocker(t, servers, key, func(c *Config) { c.TTL = lateTTL; c.NoWait = true })
		began := time.Now()
		ls, err := l.Acquire(lockertest.Ctx(t, 2*lateTTL))
		if err == nil {
			lockertest.Release(ls)
		}
		if !errors.Is(err, locker.ErrHeld) || time.Since(began) > lateWithin {
			t.Fatalf("a --no-wait candidate after the delete: %v after %v; want ErrHeld at once, not a wait of the holder's TTL", err, time.Since(began))
		}
	})
	t.Run("the guard releases", func(t *testing.T) {
		servers, key, a, held := lateSetup(t)
		ch := lateCandidate(t, servers, key)
		if err := a.ReleaseHandle(lockertest.Ctx(t, 10*time.Second), held.Handle()); err != nil {
			t.Fatal(err)
		}
		awaitLed(t, ch, held)
	})
}

// TestLastRecord: a winner names its znode in the last-winner record
// before it leads, and its release empties the record, so that a
// candidate that starts later leads at once even when a release record
// written since names another znode (a candidate that gave up).
func TestLastRecord(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 2 * lateTTL})
	servers := z.Addrs()
	c := rawConn(t, servers, "")
	key := lockertest.Key(t)
	ttl := func(c *Config) { c.TTL = lateTTL }
	a := newLocker(t, servers, key, ttl)
	held := lockertest.MustAcquire(t, a)
	data, _, err := c.Get(a.dir + "/" + lastName)
	if err != nil {
		t.Fatalf("read the last-winner record: %v", err)
	}
	if want := string(a.lastRecord(path.Base(held.(*lease).node))); string(data) != want {
		t.Fatalf("last-winner record %q, want %q", data, want)
	}
	if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if data, _, err = c.Get(a.dir + "/" + lastName); err != nil || len(data) != 0 {
		t.Fatalf("last-winner record after the release: %q, %v; want it empty", data, err)
	}
	if _, err := c.Set(a.dir+"/"+releasedName, []byte("@0000000000000001-0000000099"), -1); err != nil {
		t.Fatal(err)
	}
	ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 2*lateTTL), newLocker(t, servers, key, ttl))
	awaitLed(t, ch, held)
}
