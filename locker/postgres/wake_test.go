package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestReleaseWakesStandby: a standby that would read the row again only
// in an hour (and the holder's TTL is a minute) takes the row as soon as
// its holder releases it: the release's notice reaches the standby's
// control listen, which wakes its campaign.
func TestReleaseWakesStandby(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	const ttl = time.Minute
	holder := newLocker(t, pg.DSN(), key, func(c *Config) { c.TTL = ttl })
	held, err := holder.Acquire(ctx(t))
	if err != nil {
		t.Fatal(err)
	}

	standby, ls := countingLockerWith(t, pg.DSN(), key, ttl, time.Hour)

	cur, err := standby.Control(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := waitControl(wctx, standby, cur.Version)
	defer func() { cancel(); <-watched }()
	select {
	case <-ls.listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby's control listen did not begin within 10s")
	}

	type result struct {
		lease locker.Lease
		err   error
	}
	acquired := make(chan result, 1)
	actx := lockertest.Ctx(t, 2*time.Minute)
	go func() {
		l, err := standby.Acquire(actx)
		acquired <- result{l, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ls.rowReads.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the standby did not read the row within 10s")
		}
	}

	released := time.Now()
	if err := held.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-acquired:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("the standby took the released row %s after the release, in %d reads", time.Since(released), ls.rowReads.Load())
		if r.lease.Epoch() <= held.Epoch() {
			t.Errorf("the standby's epoch %d is not greater than the holder's %d", r.lease.Epoch(), held.Epoch())
		}
		if err := r.lease.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the standby did not take the released row within 20s: the release's notice did not wake it")
	}
}
