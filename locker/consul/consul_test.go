package consul

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// These tests run against real Consul servers (tests/testcluster) with
// Consul's shortest session TTL, 10s.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// cluster is a running Consul cluster plus an admin client that plays the
// operator (deleting keys, destroying sessions by hand).
type cluster struct {
	*testcluster.Consul
	admin *api.Client
}

func startCluster(t *testing.T, opts testcluster.ConsulOptions) *cluster {
	t.Helper()
	c := testcluster.StartConsul(t, opts)
	// Non-pooled: no idle connection goroutines linger for goleak.
	cfg := api.DefaultNonPooledConfig()
	cfg.Address, cfg.Token = c.HTTPAddr(0), c.ManagementToken()
	admin, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A session names its agent's node, which must already be in the
	// catalog ("Missing node registration"); a new agent registers itself
	// a moment after the cluster answers reads.
	n := max(opts.Servers, 1)
	waitFor(t, 30*time.Second, "every node in the catalog", func() bool {
		nodes, _, err := admin.Catalog().Nodes(&api.QueryOptions{RequireConsistent: true})
		return err == nil && len(nodes) == n
	})
	return &cluster{Consul: c, admin: admin}
}

// locker builds a Locker for key against addr and closes it with the test.
func (c *cluster) locker(t *testing.T, key, addr string, change ...func(*Config)) *Locker {
	t.Helper()
	cfg := testConfig(key, addr)
	cfg.Token = c.ManagementToken()
	for _, f := range change {
		f(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sessions lists the sessions leaderrun created for key.
func (c *cluster) sessions(t *testing.T, l *Locker) []*api.SessionEntry {
	t.Helper()
	all, _, err := c.admin.Session().List(&api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.SessionEntry
	for _, s := range all {
		if s.Name == l.sessionName() {
			out = append(out, s)
		}
	}
	return out
}

func acquire(t *testing.T, l *Locker) *lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ls, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire %s: %v", l.path, err)
	}
	return ls.(*lease)
}

func release(t *testing.T, ls *lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// waitLost returns how long Lost took to close, failing after limit.
func waitLost(t *testing.T, ls *lease, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case <-ls.Lost():
		return time.Since(start)
	case <-time.After(limit - time.Since(start)):
		t.Fatalf("Lost not closed within %v", limit)
		return 0
	}
}

// waitFor polls cond until it holds or limit passes.
var waitFor = testsupport.WaitFor

func TestSingleServer(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)

	// Sequential first: goleak's snapshot must not see other tests' work.
	t.Run("CancelWhileWaiting", func(t *testing.T) { testCancelWhileWaiting(t, c, addr) })

	for name, f := range map[string]func(*testing.T, *cluster, string){
		"SessionHasNoChecks":     testSessionHasNoChecks,
		"OptInChecks":            testOptInChecks,
		"Handover":               testHandover,
		"HandoverAfterLockDelay": testHandoverAfterLockDelay,
		"StandbyAfterHandEdit":   testStandbyAfterHandEdit,
		"NoWaitWhileHeld":        testNoWaitWhileHeld,
		"EpochsIncrease":         testEpochsIncrease,
		"LostOnKeyDelete":        testLostOnKeyDelete,
		"LostOnSessionDestroy":   testLostOnSessionDestroy,
		"SessionExpiry":          testSessionExpiry,
		"Leader":                 testLeader,
		"NeverUsed":              testNeverUsed,
		"ReleaseHandle":          testReleaseHandle,
		"RenewRoundTrip":         testRenewRoundTrip,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, c, addr)
		})
	}
}

// testCancelWhileWaiting: a waiting candidate whose ctx ends returns at
// once, destroys its session and leaves no goroutine behind.
func testCancelWhileWaiting(t *testing.T, c *cluster, addr string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := c.locker(t, "cancel", addr)
	b := c.locker(t, "cancel", addr)
	la := acquire(t, a)
	defer func() { // before goleak looks, even when the test failed
		la.Release(context.Background())
		a.Close()
		b.Close()
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx)
		done <- err
	}()
	waitFor(t, 5*time.Second, "the second candidate's session", func() bool { return len(c.sessions(t, b)) == 2 })
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire after cancel: got %v, want context.Canceled", err)
		}
		t.Logf("Acquire returned %v after cancel", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("Acquire still waiting 1s after its ctx was cancelled")
	}
	if s := c.sessions(t, b); len(s) != 1 || s[0].ID != la.session {
		t.Fatalf("after cancel: sessions %v, want only the leader's %s", s, la.session)
	}
}

// testSessionHasNoChecks reads our session back from the server: TTL only,
// no serfHealth or any other check (DESIGN §1.5).
func testSessionHasNoChecks(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "nochecks", addr)
	ls := acquire(t, l)
	defer release(t, ls)
	se, _, err := c.admin.Session().Info(ls.session, &api.QueryOptions{RequireConsistent: true})
	if err != nil || se == nil {
		t.Fatalf("session info: %v, %v", se, err)
	}
	if len(se.Checks) != 0 || len(se.NodeChecks) != 0 || len(se.ServiceChecks) != 0 {
		t.Fatalf("session has checks: Checks=%v NodeChecks=%v ServiceChecks=%v", se.Checks, se.NodeChecks, se.ServiceChecks)
	}
	if se.TTL != "10s" || se.Behavior != api.SessionBehaviorRelease || se.LockDelay != 250*time.Millisecond {
		t.Fatalf("session TTL=%q Behavior=%q LockDelay=%v", se.TTL, se.Behavior, se.LockDelay)
	}
	if se.Name != l.sessionName() {
		t.Fatalf("session name %q", se.Name)
	}
}

// testOptInChecks: checks the user asks for are attached, and only with a
// lock-delay of at least the TTL.
func testOptInChecks(t *testing.T, c *cluster, addr string) {
	cfg := testConfig("checks", addr)
	cfg.SessionChecks = []string{"serfHealth"}
	if _, err := New(cfg); !errors.Is(err, locker.ErrRefused) {
		t.Fatalf("New with checks and lock-delay %v < TTL: got %v, want a ConfigError", cfg.LockDelay, err)
	}
	l := c.locker(t, "checks", addr, func(cfg *Config) {
		cfg.SessionChecks, cfg.LockDelay = []string{"serfHealth"}, cfg.TTL
	})
	ls := acquire(t, l)
	defer release(t, ls)
	se, _, err := c.admin.Session().Info(ls.session, nil)
	if err != nil || se == nil {
		t.Fatalf("session info: %v, %v", se, err)
	}
	if got := sessionChecks(se); len(got) != 1 || got[0] != "serfHealth" {
		t.Fatalf("opted-in session checks %v, want [serfHealth]", got)
	}
}

// testHandover: the second candidate blocks while the first leads and takes
// over right after Release, with a higher epoch.
func testHandover(t *testing.T, c *cluster, addr string) {
	a := c.locker(t, "handover", addr)
	b := c.locker(t, "handover", addr)
	la := acquire(t, a)

	type result struct {
		ls  locker.Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		ls, err := b.Acquire(context.Background())
		done <- result{ls, err, time.Now()}
	}()
	waitFor(t, 5*time.Second, "the second candidate's session", func() bool { return len(c.sessions(t, b)) == 2 })
	select {
	case r := <-done:
		t.Fatalf("second candidate acquired while the first leads: %v %v", r.ls, r.err)
	case <-time.After(time.Second): // it must still be waiting
	}

	start := time.Now()
	release(t, la)
	r := <-done
	if r.err != nil {
		t.Fatalf("second Acquire: %v", r.err)
	}
	defer release(t, r.ls.(*lease))
	took := r.at.Sub(start)
	t.Logf("acquire after Release: %v (epochs %d -> %d)", took, la.Epoch(), r.ls.Epoch())
	if took > 250*time.Millisecond+500*time.Millisecond {
		t.Errorf("handover took %v, want within lock-delay + 500ms", took)
	}
	if r.ls.Epoch() <= la.Epoch() {
		t.Errorf("epoch %d after %d: not increasing", r.ls.Epoch(), la.Epoch())
	}
}

// testHandoverAfterLockDelay: when the leader's session is destroyed by
// hand, the standby does not take the key for a free one (its holder's job
// may still run, DESIGN §1.12 "A record edited by hand"): it takes it once
// the holder's own release marked it, and Consul keeps it for the
// lock-delay; the standby takes over right after that, without busy
// polling.
func testHandoverAfterLockDelay(t *testing.T, c *cluster, addr string) {
	const delay = 500 * time.Millisecond
	set := func(cfg *Config) { cfg.LockDelay = delay }
	a := c.locker(t, "lockdelay", addr, set)
	b := c.locker(t, "lockdelay", addr, set)
	la := acquire(t, a)
	done := make(chan time.Time, 1)
	var lb locker.Lease
	var errB error
	go func() {
		lb, errB = b.Acquire(context.Background())
		done <- time.Now()
	}()
	waitFor(t, 5*time.Second, "the second candidate's session", func() bool { return len(c.sessions(t, b)) == 2 })
	// b reads the key held first: a candidate that never saw the holder
	// takes a freed key for a free one.
	time.Sleep(2 * time.Second)

	start := time.Now()
	if _, err := c.admin.Session().Destroy(la.session, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatalf("the standby took the key %v after the holder's session was destroyed by hand, before its release: %v",
			time.Since(start), errB)
	case <-time.After(2 * delay):
	}
	release(t, la)
	at := <-done
	if errB != nil {
		t.Fatalf("second Acquire: %v", errB)
	}
	defer release(t, lb.(*lease))
	took := at.Sub(start)
	t.Logf("acquire after session destroy with lock-delay %v, then the release: %v", delay, took)
	if took > 2*delay+time.Second {
		t.Errorf("took %v, want within a second of the release", took)
	}
	if lb.Epoch() <= la.Epoch() {
		t.Errorf("epoch %d after %d: not increasing", lb.Epoch(), la.Epoch())
	}
}

// testStandbyAfterHandEdit: the key deleted, or released with the holder's
// session, by hand while a standby waits. The standby takes neither for a
// free key: it waits until the holder's own release (DESIGN §1.12, "A
// record edited by hand"), which leaves its marker even on a key that is
// gone, and then takes over at once, with a higher epoch.
func testStandbyAfterHandEdit(t *testing.T, c *cluster, addr string) {
	for _, tc := range []struct {
		name string
		edit func(l *Locker, ls *lease) error
	}{
		{"deleted", func(l *Locker, _ *lease) error { _, err := c.admin.KV().Delete(l.path, nil); return err }},
		{"released", func(l *Locker, ls *lease) error {
			_, _, err := c.admin.KV().Release(&api.KVPair{Key: l.path, Session: ls.session}, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.locker(t, "handedit-"+tc.name, addr)
			b := c.locker(t, "handedit-"+tc.name, addr)
			la := acquire(t, a)
			done := make(chan time.Time, 1)
			var lb locker.Lease
			var errB error
			go func() {
				lb, errB = b.Acquire(context.Background())
				done <- time.Now()
			}()
			waitFor(t, 5*time.Second, "the second candidate's session", func() bool { return len(c.sessions(t, b)) == 2 })
			time.Sleep(2 * time.Second) // b reads the key held
			if err := tc.edit(a, la); err != nil {
				t.Fatal(err)
			}
			waitLost(t, la, time.Now(), 5*time.Second)
			select {
			case <-done:
				t.Fatalf("the standby took the key after it was %s by hand, before the holder released: %v", tc.name, errB)
			case <-time.After(2 * time.Second):
			}
			released := time.Now()
			release(t, la)
			at := <-done
			if errB != nil {
				t.Fatalf("second Acquire: %v", errB)
			}
			defer release(t, lb.(*lease))
			t.Logf("acquire %v after the release", at.Sub(released))
			if took := at.Sub(released); took > 2*time.Second {
				t.Errorf("the standby took the key %v after the holder's release, want at once", took)
			}
			if lb.Epoch() <= la.Epoch() {
				t.Errorf("epoch %d after %d: not increasing", lb.Epoch(), la.Epoch())
			}
		})
	}
}

// testNoWaitWhileHeld: one try, ErrHeld, and our session is gone again.
func testNoWaitWhileHeld(t *testing.T, c *cluster, addr string) {
	a := c.locker(t, "nowait", addr)
	b := c.locker(t, "nowait", addr, func(cfg *Config) { cfg.NoWait = true })
	la := acquire(t, a)
	defer release(t, la)

	start := time.Now()
	_, err := b.Acquire(context.Background())
	if !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("NoWait Acquire while held: got %v, want ErrHeld", err)
	}
	t.Logf("NoWait: %v after %v", err, time.Since(start))
	if !strings.Contains(err.Error(), "test-nowait") {
		t.Errorf("error %q does not name the holder", err)
	}
	if s := c.sessions(t, b); len(s) != 1 || s[0].ID != la.session {
		t.Fatalf("sessions after NoWait: %v, want only the leader's", s)
	}
}

// testEpochsIncrease: 20 leaderships in a row, the key deleted by hand
// between some of them. ModifyIndex keeps growing where LockIndex restarts.
func testEpochsIncrease(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "epochs", addr)
	var prev uint64
	restarted := false
	for i := 0; i < 20; i++ {
		ls := acquire(t, l)
		if ls.Epoch() <= prev {
			t.Fatalf("leadership %d: epoch %d after %d", i, ls.Epoch(), prev)
		}
		prev = ls.Epoch()
		pair, _, err := c.admin.KV().Get(l.path, nil)
		if err != nil || pair == nil {
			t.Fatalf("read key: %v %v", pair, err)
		}
		restarted = restarted || pair.LockIndex == 1 && i > 0
		release(t, ls)
		if i%3 == 1 {
			if _, err := c.admin.KV().Delete(l.path, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !restarted {
		t.Error("LockIndex never restarted after a delete; the test did not exercise it")
	}
}

// testLostOnKeyDelete: an operator deletes the key; Lost closes promptly.
func testLostOnKeyDelete(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "deleted", addr)
	ls := acquire(t, l)
	defer ls.Release(context.Background())
	start := time.Now()
	if _, err := c.admin.KV().Delete(l.path, nil); err != nil {
		t.Fatal(err)
	}
	took := waitLost(t, ls, start, time.Second)
	t.Logf("Lost closed %v after the key was deleted: %s", took, ls.LostReason())
	if !strings.Contains(ls.LostReason(), "deleted") {
		t.Errorf("LostReason %q", ls.LostReason())
	}
}

// testLostOnSessionDestroy: an operator destroys our session; Lost closes
// and Renew says ErrLost.
func testLostOnSessionDestroy(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "destroyed", addr)
	ls := acquire(t, l)
	defer ls.Release(context.Background())
	start := time.Now()
	if _, err := c.admin.Session().Destroy(ls.session, nil); err != nil {
		t.Fatal(err)
	}
	took := waitLost(t, ls, start, time.Second)
	t.Logf("Lost closed %v after the session was destroyed: %s", took, ls.LostReason())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := ls.Renew(ctx); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew of a destroyed session: got %v, want ErrLost", err)
	}
}

// testSessionExpiry: without renewals the server ends the session, never
// before the TTL (in practice about twice the TTL, DESIGN §1.5).
func testSessionExpiry(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "expiry", addr)
	ls := acquire(t, l)
	defer ls.Release(context.Background())
	start := time.Now()
	took := waitLost(t, ls, start, 2*MinTTL+10*time.Second)
	t.Logf("session expired %v after Acquire returned (TTL %v): %s", took, MinTTL, ls.LostReason())
	if took < MinTTL-time.Second {
		t.Errorf("the server expired the session after %v, before its TTL %v", took, MinTTL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := ls.Renew(ctx); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew of an expired session: got %v, want ErrLost", err)
	}
}

// testLeader: the holder record, epoch and TTL; ErrNoLeader when free.
func testLeader(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "leader", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader of a fresh key: got %v, want ErrNoLeader", err)
	}
	ls := acquire(t, l)
	h, err := l.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != "test-leader" || h.Epoch != ls.Epoch() || h.LeaseRemaining != MinTTL || h.PID == 0 || h.AcquiredAt.IsZero() {
		t.Fatalf("Leader = %+v, want id test-leader, epoch %d, lease %v", h, ls.Epoch(), MinTTL)
	}
	release(t, ls)
	if _, err := l.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader after Release: got %v, want ErrNoLeader", err)
	}
}

// testNeverUsed: with neither the KV key nor records beside it, Leader
// says never used and names the path and address; a release leaves the
// key, free, so afterwards it is only "no leader".
func testNeverUsed(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "neverused", addr)
	lockertest.NeverUsed(t, l, func() { release(t, acquire(t, l)) },
		"KV leaderrun-test/neverused on Consul ", addr)
}

// testReleaseHandle: another process gives back our lease from the handle
// alone, as Release would: the key is free at once, without the lock-delay
// a mere session destroy leaves; doing it twice is fine.
func testReleaseHandle(t *testing.T, c *cluster, addr string) {
	a := c.locker(t, "handle", addr)
	other := c.locker(t, "handle", addr, func(cfg *Config) { cfg.NoWait = true })
	ls := acquire(t, a)
	defer ls.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := other.ReleaseHandle(ctx, ls.Handle()); err != nil {
		t.Fatalf("ReleaseHandle: %v", err)
	}
	waitLost(t, ls, start, time.Second)
	if len(c.sessions(t, a)) != 0 {
		t.Fatal("session still exists after ReleaseHandle")
	}
	if err := other.ReleaseHandle(ctx, ls.Handle()); err != nil {
		t.Fatalf("second ReleaseHandle: %v", err)
	}
	// One try, right away: inside a lock-delay Consul would refuse it.
	next := acquire(t, other)
	t.Logf("next holder acquired %v after ReleaseHandle (lock-delay 250ms)", time.Since(start))
	if next.Epoch() <= ls.Epoch() {
		t.Errorf("epoch %d after %d", next.Epoch(), ls.Epoch())
	}
	release(t, next)
}

// testRenewRoundTrip: Renew reports the TTL the server granted; measures
// the round trip.
func testRenewRoundTrip(t *testing.T, c *cluster, addr string) {
	l := c.locker(t, "renew", addr)
	ls := acquire(t, l)
	defer release(t, ls)
	var total, worst time.Duration
	const n = 20
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		granted, err := ls.Renew(ctx)
		rtt := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if granted != MinTTL {
			t.Fatalf("Renew granted %v, want %v", granted, MinTTL)
		}
		total += rtt
		worst = max(worst, rtt)
	}
	t.Logf("Renew round trip: mean %v, max %v over %d", total/n, worst, n)
	select {
	case <-ls.Lost():
		t.Fatalf("Lost closed: %s", ls.LostReason())
	default:
	}
}

// TestFailover runs three servers and talks to a follower: killing the Raft
// leader must not cost the lease (Renew works again once a new leader is
// elected, long before the TTL; Lost stays open). Then with every server
// down, Renew must fail within its ctx, not hang, and still not claim loss.
func TestFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.ConsulOptions{Servers: 3})
	raft, err := c.admin.Operator().RaftGetConfiguration(&api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	leader, follower := -1, -1
	for _, s := range raft.Servers {
		var i int
		if _, err := fmt.Sscanf(s.Node, "s%d", &i); err != nil {
			t.Fatalf("raft server node %q: %v", s.Node, err)
		}
		if s.Leader {
			leader = i
		} else if follower < 0 {
			follower = i
		}
	}
	if leader < 0 || follower < 0 {
		t.Fatalf("no leader/follower in %+v", raft.Servers)
	}
	l := c.locker(t, "failover", c.HTTPAddr(follower))
	ls := acquire(t, l)
	defer ls.Release(context.Background())

	start := time.Now()
	c.Kill(leader)
	var took time.Duration
	var failures int
	var firstErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		granted, err := ls.Renew(ctx)
		cancel()
		if err == nil {
			if granted != MinTTL {
				t.Fatalf("granted %v", granted)
			}
			took = time.Since(start)
			break
		}
		if errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew after killing the raft leader: %v", err)
		}
		failures++
		if firstErr == nil {
			firstErr = err
		}
		if time.Since(start) > MinTTL-2*time.Second {
			t.Fatalf("Renew still failing %v after killing the raft leader: %v", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond) // the supervisor's retry pace
	}
	t.Logf("Renew works again %v after killing raft leader s%d (%d failed attempts, first: %v)", took, leader, failures, firstErr)
	select {
	case <-ls.Lost():
		t.Fatalf("Lost closed across a leader change: %s", ls.LostReason())
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	h, err := l.Leader(ctx)
	cancel()
	if err != nil || h.Epoch != ls.Epoch() {
		t.Fatalf("after failover Leader = %+v, %v; want epoch %d", h, err, ls.Epoch())
	}

	// Every server down.
	for i := range c.Addrs() {
		if i != leader {
			c.Stop(i)
		}
	}
	for _, timeout := range []time.Duration{300 * time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		_, err := ls.Renew(ctx)
		took := time.Since(start)
		cancel()
		if err == nil || errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew with every server down: got %v, want a plain error", err)
		}
		if took > timeout+200*time.Millisecond {
			t.Fatalf("Renew with every server down took %v, ctx allowed %v", took, timeout)
		}
		t.Logf("Renew with every server down failed after %v (ctx %v): %v", took, timeout, err)
	}
	select {
	case <-ls.Lost():
		t.Fatalf("Lost closed while servers were merely down: %s", ls.LostReason())
	default:
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	defer rcancel()
	start = time.Now()
	if err := ls.Release(rctx); err == nil {
		t.Fatal("Release with every server down reported success")
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Fatalf("Release with every server down took %v", d)
	}
}

// TestACL: a token that may read but not write the key is refused at once,
// with a clear message that never contains the token.
func TestACL(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1, ACL: true})
	addr := c.HTTPAddr(0)
	readOnly := c.CreateToken(t, `key_prefix "" { policy = "read" }
session_prefix "" { policy = "write" }`)
	writer := c.CreateToken(t, `key_prefix "leaderrun-test/" { policy = "write" }
session_prefix "" { policy = "write" }`)

	for name, token := range map[string]string{
		"read-only token": readOnly,
		"unknown token":   "7d0f2b9e-4c1a-4f3e-8b6d-2a9c5e1f0b3d",
		"no token":        "",
	} {
		t.Run(name, func(t *testing.T) {
			l := c.locker(t, "acl", addr, func(cfg *Config) { cfg.Token = token })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := l.Acquire(ctx)
			took := time.Since(start)
			if !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("Acquire: got %v, want ErrRefused", err)
			}
			if took > 2*time.Second {
				t.Errorf("refusal took %v", took)
			}
			msg := err.Error()
			if token != "" && strings.Contains(msg, token) {
				t.Fatalf("the token appears in the error: %s", msg)
			}
			if !strings.Contains(strings.ToLower(msg), "permission denied") && !strings.Contains(msg, "ACL not found") {
				t.Errorf("error does not say why: %s", msg)
			}
			t.Logf("refused after %v: %s", took, msg)
			if s := c.sessions(t, l); len(s) != 0 {
				t.Errorf("refused candidate left sessions behind: %v", s)
			}
		})
	}

	// A token that may write the lock key but not the queue beside it (a
	// policy on the key alone) still campaigns, beside a queued candidate,
	// and only one of them holds the key at a time.
	t.Run("token without the queue", func(t *testing.T) {
		keyOnly := c.CreateToken(t, `key "leaderrun-test/aclq" { policy = "write" }
session_prefix "" { policy = "write" }`)
		queued := c.locker(t, "aclq", addr)
		bare := c.locker(t, "aclq", addr, func(cfg *Config) { cfg.Token = keyOnly })
		first := acquire(t, bare)
		win := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), queued)
		waitFor(t, 10*time.Second, "the queued candidate's entry", func() bool { return c.queued(t, queued) == 1 })
		release(t, first)
		got := <-win
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		again := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), bare)
		select {
		case a := <-again:
			t.Fatalf("the token without the queue acquired a held key: %v", a.Err)
		case <-time.After(time.Second):
		}
		lockertest.Release(got.Lease)
		if a := <-again; a.Err != nil {
			t.Fatalf("the token without the queue: %v", a.Err)
		} else {
			lockertest.Release(a.Lease)
		}
	})

	t.Run("write token", func(t *testing.T) {
		l := c.locker(t, "acl", addr, func(cfg *Config) { cfg.Token = writer })
		ls := acquire(t, l)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := ls.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		ro := c.locker(t, "acl", addr, func(cfg *Config) { cfg.Token = readOnly })
		if h, err := ro.Leader(ctx); err != nil || h.Epoch != ls.Epoch() {
			t.Fatalf("Leader with a read token: %+v, %v", h, err)
		}
		release(t, ls)
	})
}
