package etcd

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestHandDeleteIsNoRelease: the holder's election key deleted by hand
// leaves its lease alive, and a waiting candidate leads only once that
// lease is gone (the holder's release revokes it), not when the key goes
// (wait.go, awaitLeaseEnd).
func TestHandDeleteIsNoRelease(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	key := lockertest.Key(t)
	ttl := func(c *Config) { c.TTL = 10 * time.Second } // outlives the test's windows
	a := newLocker(t, eps, key, ttl)
	held := lockertest.MustAcquire(t, a)
	ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), newLocker(t, eps, key, ttl))
	testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
		return len(candidateKeys(t, cli, a)) == 2
	})
	select {
	case r := <-ch:
		t.Fatalf("second Acquire returned while the first leads: %v", r.Err)
	case <-time.After(500 * time.Millisecond): // it reads who is ahead and watches
	}

	if _, err := cli.Delete(lockertest.Ctx(t, 5*time.Second), held.(*lease).key); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 5*time.Second, "the holder sees its key gone", func() bool { return testsupport.IsClosed(held.Lost()) })
	resp, err := cli.TimeToLive(lockertest.Ctx(t, 5*time.Second), held.(*lease).id)
	if err != nil || resp.TTL <= 0 {
		t.Fatalf("the holder's lease after the hand delete: %v, %v; want it alive", resp, err)
	}
	select {
	case r := <-ch:
		t.Fatalf("second Acquire returned (%v) after the key was deleted by hand, while the holder's lease lives", r.Err)
	case <-time.After(time.Second):
	}

	if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Err != nil {
		t.Fatalf("second Acquire after the holder's release: %v", r.Err)
	}
	if r.Lease.Epoch() <= held.Epoch() {
		t.Errorf("epoch %d after %d, want strictly greater", r.Lease.Epoch(), held.Epoch())
	}
	if resp, err := cli.TimeToLive(lockertest.Ctx(t, 5*time.Second), held.(*lease).id); err == nil && resp.TTL > 0 {
		t.Errorf("the holder's lease lives on after its release (TTL %d)", resp.TTL)
	}
}

// TestHandDeleteLateCandidate: the holder's election key deleted by hand,
// then a candidate that starts only after the delete. It finds no key
// ahead of its own, and leads only once the holder's lease is gone (the
// holder's release revokes it): it learns of the holder from the last
// winner's record (lastKey).
func TestHandDeleteLateCandidate(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	key := lockertest.Key(t)
	ttl := func(c *Config) { c.TTL = 10 * time.Second } // outlives the test's windows
	a := newLocker(t, eps, key, ttl)
	held := lockertest.MustAcquire(t, a)
	if _, err := cli.Delete(lockertest.Ctx(t, 5*time.Second), a.dir, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 5*time.Second, "the holder sees its key gone", func() bool { return testsupport.IsClosed(held.Lost()) })

	// A single attempt does not wait the lease out.
	began := time.Now()
	if ls, err := newLocker(t, eps, key, ttl, func(c *Config) { c.NoWait = true }).Acquire(lockertest.Ctx(t, 30*time.Second)); !errors.Is(err, locker.ErrHeld) || time.Since(began) > 8*time.Second {
		if err == nil {
			lockertest.Release(ls)
		}
		t.Fatalf("a --no-wait candidate after the delete: %v after %v; want ErrHeld at once, not a wait of the holder's lease", err, time.Since(began))
	}

	ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), newLocker(t, eps, key, ttl))
	testsupport.WaitFor(t, 5*time.Second, "the late candidate's key appears", func() bool {
		return len(candidateKeys(t, cli, a)) == 1
	})
	select {
	case r := <-ch:
		t.Fatalf("the late candidate's Acquire returned (%v) while the holder's lease lives", r.Err)
	case <-time.After(2 * time.Second):
	}
	if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Err != nil {
		t.Fatalf("the late candidate's Acquire after the holder's release: %v", r.Err)
	}
	if r.Lease.Epoch() <= held.Epoch() {
		t.Errorf("epoch %d after %d, want strictly greater", r.Lease.Epoch(), held.Epoch())
	}
}
