package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestCampaign runs the election tests against one shared single-member
// cluster; each subtest uses its own key.
func TestCampaign(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)

	// The second candidate waits while the first leads, and takes over
	// promptly with a higher epoch once the first releases.
	t.Run("SecondWaitsThenTakesOver", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t))
		first := lockertest.MustAcquire(t, a)

		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), b)
		testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
			return len(candidateKeys(t, cli, a)) == 2
		})
		select {
		case r := <-ch:
			t.Fatalf("second Acquire returned while the first leads: %v", r.Err)
		case <-time.After(300 * time.Millisecond): // a window in which it must stay blocked
		}

		released := time.Now()
		if err := first.Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-ch
		if r.Err != nil {
			t.Fatalf("second Acquire: %v", r.Err)
		}
		defer r.Lease.Release(lockertest.Ctx(t, 2*time.Second))
		latency := r.At.Sub(released)
		t.Logf("acquire after release: %v", latency)
		if latency > time.Second {
			t.Errorf("second candidate took %v after the release, want < 1s", latency)
		}
		if r.Lease.Epoch() <= first.Epoch() {
			t.Errorf("epoch %d after %d, want strictly greater", r.Lease.Epoch(), first.Epoch())
		}
		// The epoch is the key's CreateRevision, not a later revision
		// (the release above moved the cluster's revision on).
		resp, err := cli.Get(lockertest.Ctx(t, 5*time.Second), r.Lease.(*lease).key)
		if err != nil || len(resp.Kvs) != 1 || uint64(resp.Kvs[0].CreateRevision) != r.Lease.Epoch() {
			t.Errorf("epoch %d is not the CreateRevision of our key (%v, %v)", r.Lease.Epoch(), resp, err)
		}
	})

	// NoWait gives up at once with ErrHeld and leaves nothing behind.
	t.Run("NoWaitHeld", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.NoWait = true })
		lockertest.MustAcquire(t, a)
		before := leaseCount(t, cli)

		start := time.Now()
		lease, err := b.Acquire(lockertest.Ctx(t, 10*time.Second))
		if !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("Acquire with NoWait while held = %v, %v; want ErrHeld", lease, err)
		}
		t.Logf("NoWait answer in %v: %v", time.Since(start), err)
		if !strings.Contains(err.Error(), a.opts.ID) {
			t.Errorf("error %q does not name the holder %q", err, a.opts.ID)
		}
		if keys := candidateKeys(t, cli, a); len(keys) != 1 {
			t.Errorf("candidate keys after NoWait = %v, want only the leader's", keys)
		}
		if after := leaseCount(t, cli); after != before {
			t.Errorf("%d leases before NoWait, %d after: its lease was not revoked", before, after)
		}
		// And without a holder, NoWait acquires.
		c := newLocker(t, eps, lockertest.Key(t)+"-free", func(c *Config) { c.NoWait = true })
		lockertest.MustAcquire(t, c)
	})

	// Cancelling a waiting Acquire returns ctx.Err() at once, revokes the
	// candidate's lease and leaves no goroutine behind.
	t.Run("CancelWhileWaiting", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t))
		lockertest.MustAcquire(t, a)
		// Dial b's client first: its connection goroutines live until
		// Close and are not what this test looks for.
		if _, err := b.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Leader: %v", err)
		}
		baseline := goleak.IgnoreCurrent()

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := lockertest.AcquireAsync(t, ctx, b)
		var waiting string
		testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
			keys := candidateKeys(t, cli, a)
			if len(keys) == 2 {
				waiting = keys[1]
			}
			return waiting != ""
		})
		cancel()
		cancelled := time.Now()
		r := <-ch
		if !errors.Is(r.Err, context.Canceled) || r.Lease != nil {
			t.Fatalf("cancelled Acquire = %v, %v; want context.Canceled", r.Lease, r.Err)
		}
		// The revocation is one Raft write; a loaded machine gets slack.
		t.Logf("Acquire returned %v after cancel", r.At.Sub(cancelled))
		if d := r.At.Sub(cancelled); d > time.Second {
			t.Errorf("Acquire returned %v after cancel, want < 1s", d)
		}
		id := leaseOfKey(t, waiting)
		ttl, err := cli.TimeToLive(lockertest.Ctx(t, 5*time.Second), id)
		if err != nil || ttl.TTL != -1 {
			t.Errorf("TimeToLive of the cancelled candidate's lease %x = %+v, %v; want revoked (-1)", id, ttl, err)
		}
		// None of our goroutines survives the Acquire. The etcd client
		// may keep its shared watch stream (one per client, reused by the
		// next watch) when a watch is cancelled before etcd confirmed it;
		// that stream belongs to the client and ends with Close.
		noLeak(t, "the cancelled Acquire", baseline,
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*watchGRPCStream).run"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*watchGRPCStream).serveWatchClient"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*watchGRPCStream).serveSubstream"),
			goleak.IgnoreAnyFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
			goleak.IgnoreTopFunction("context.(*cancelCtx).propagateCancel.func2"))
		b.Close()
		noLeak(t, "the closed Locker", baseline)
	})

	// Epochs strictly increase across successive leaderships, also when the
	// whole prefix is deleted by hand in between (DESIGN §1.1).
	t.Run("EpochsIncrease", func(t *testing.T) {
		l := newLocker(t, eps, lockertest.Key(t))
		var last uint64
		for i := 0; i < 20; i++ {
			lease, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
			if err != nil {
				t.Fatalf("leadership %d: %v", i, err)
			}
			if lease.Epoch() <= last {
				t.Errorf("leadership %d: epoch %d after %d", i, lease.Epoch(), last)
			}
			last = lease.Epoch()
			if err := lease.Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			if i%2 == 0 {
				if _, err := cli.Delete(lockertest.Ctx(t, 5*time.Second), "/"+testPrefix+"/", clientv3.WithPrefix()); err != nil {
					t.Fatalf("delete prefix: %v", err)
				}
			}
		}
	})

	// A waiting candidate keeps its own lease alive for longer than its TTL;
	// once it leads, only Renew keeps the lease: without renewals it runs
	// out within about a TTL and Lost closes.
	t.Run("StandbyKeepAliveOnlyWhileWaiting", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.TTL = 2 * time.Second })
		first := lockertest.MustAcquire(t, a)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), b)
		testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
			return len(candidateKeys(t, cli, a)) == 2
		})
		select {
		case r := <-ch: // two TTLs of waiting
			t.Fatalf("second Acquire returned while the first leads: %v", r.Err)
		case <-time.After(4 * time.Second):
		}
		if err := first.Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-ch
		if r.Err != nil {
			t.Fatalf("Acquire after waiting two TTLs: %v", r.Err)
		}
		select {
		case <-r.Lease.Lost():
			t.Logf("unrenewed lease lost %v after Acquire: %s", time.Since(r.At), r.Lease.LostReason())
		case <-time.After(6 * time.Second):
			t.Fatal("a 2s lease nobody renews is still alive 6s after Acquire: something else renews it")
		}
	})

	// DESIGN §1.7: a waiter whose own key vanished must not lead once its
	// predecessor goes, even though it then has no predecessor; a later
	// candidate leads instead.
	t.Run("VerifyAfterWait", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t))
		first := lockertest.MustAcquire(t, a)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), b)
		var waiting string
		testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
			if keys := candidateKeys(t, cli, a); len(keys) == 2 {
				waiting = keys[1]
			}
			return waiting != ""
		})
		if _, err := cli.Delete(lockertest.Ctx(t, 5*time.Second), waiting); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if err := first.Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-ch
		if r.Err == nil || errors.Is(r.Err, locker.ErrRefused) || errors.Is(r.Err, locker.ErrHeld) {
			t.Fatalf("Acquire of a candidate whose key vanished = %v, %v; want a retryable error", r.Lease, r.Err)
		}
		t.Logf("Acquire: %v", r.Err)
		c := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.NoWait = true })
		lockertest.MustAcquire(t, c)
		if ttl, err := cli.TimeToLive(lockertest.Ctx(t, 5*time.Second), leaseOfKey(t, waiting)); err != nil || ttl.TTL != -1 {
			t.Errorf("lease of the failed candidate: %+v, %v; want revoked", ttl, err)
		}
	})

	// A waiting candidate whose lease is revoked notices it through its own
	// keep-alive and gives up, instead of waiting for the leader.
	t.Run("CandidateLeaseRevoked", func(t *testing.T) {
		a := newLocker(t, eps, lockertest.Key(t))
		b := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.TTL = 3 * time.Second })
		lockertest.MustAcquire(t, a)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 20*time.Second), b)
		var waiting string
		testsupport.WaitFor(t, 5*time.Second, "second candidate's key appears", func() bool {
			if keys := candidateKeys(t, cli, a); len(keys) == 2 {
				waiting = keys[1]
			}
			return waiting != ""
		})
		revoked := time.Now()
		if _, err := cli.Revoke(lockertest.Ctx(t, 5*time.Second), leaseOfKey(t, waiting)); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		select {
		case r := <-ch:
			t.Logf("Acquire returned %v after the revoke: %v", r.At.Sub(revoked), r.Err)
			if r.Err == nil || errors.Is(r.Err, locker.ErrRefused) {
				t.Fatalf("Acquire = %v, %v; want a retryable error", r.Lease, r.Err)
			}
		case <-time.After(3 * time.Second): // the keep-alive runs every TTL/3 = 1s
			t.Fatal("a candidate whose lease was revoked still waits 3s later")
		}
	})

	// A release wakes only the successor. Measurement: every candidate has
	// its own Locker whose onWake hook counts how often its wait on the
	// predecessor ended and it looked again. Candidates queue in a known
	// order; then each leader in turn releases. After each hand-over the
	// successor must have woken exactly once and every later candidate not
	// at all; a wait that watched the whole prefix (a thundering herd) would
	// wake every later candidate on each hand-over, before the successor has
	// even verified its key, so the counts would show it.
	t.Run("PredecessorOnlyWakeup", func(t *testing.T) {
		const n = 20
		wakes := make([]atomic.Int64, n)
		lockers := make([]*Locker, n)
		for i := range lockers {
			lockers[i] = newLocker(t, eps, lockertest.Key(t))
			lockers[i].onWake = func() { wakes[i].Add(1) }
		}
		leases := make([]locker.Lease, n)
		leases[0] = lockertest.MustAcquire(t, lockers[0])
		results := make([]<-chan lockertest.Acquired, n)
		ctx := lockertest.Ctx(t, 60*time.Second)
		for i := 1; i < n; i++ {
			results[i] = lockertest.AcquireAsync(t, ctx, lockers[i])
			testsupport.WaitFor(t, 5*time.Second, fmt.Sprintf("candidate %d queues", i), func() bool {
				return len(candidateKeys(t, cli, lockers[0])) == i+1
			})
		}
		for i := 1; i < n; i++ {
			if err := leases[i-1].Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
				t.Fatalf("release %d: %v", i-1, err)
			}
			r := <-results[i]
			if r.Err != nil {
				t.Fatalf("candidate %d: %v", i, r.Err)
			}
			leases[i] = r.Lease
			if got := wakes[i].Load(); got != 1 {
				t.Errorf("hand-over %d: successor woke %d times, want 1", i, got)
			}
			for j := i + 1; j < n; j++ {
				if got := wakes[j].Load(); got != 0 {
					t.Errorf("hand-over %d: candidate %d woke %d times, want 0", i, j, got)
				}
			}
		}
		if err := leases[n-1].Release(lockertest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatalf("release last: %v", err)
		}
		var counts []string
		for i := range wakes {
			counts = append(counts, strconv.FormatInt(wakes[i].Load(), 10))
		}
		t.Logf("wake-ups per candidate: %s", strings.Join(counts, " "))
	})
}

// leaseOfKey returns the lease ID an election key is named after.
func leaseOfKey(t testing.TB, key string) clientv3.LeaseID {
	t.Helper()
	i := strings.LastIndex(key, "@")
	id, err := strconv.ParseInt(key[i+1:], 16, 64)
	if i < 0 || err != nil {
		t.Fatalf("election key %q does not end in @<lease-hex>", key)
	}
	return clientv3.LeaseID(id)
}

// leaseCount counts the cluster's live leases.
func leaseCount(t testing.TB, cli *clientv3.Client) int {
	t.Helper()
	resp, err := cli.Leases(lockertest.Ctx(t, 5*time.Second))
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	return len(resp.Leases)
}

// noLeak waits up to 5s (the etcd client ends goroutines asynchronously)
// until no goroutine is running beyond those opts ignore.
func noLeak(t testing.TB, what string, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for err := goleak.Find(opts...); err != nil; err = goleak.Find(opts...) {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left behind by %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
