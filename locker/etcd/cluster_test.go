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

// etcdLeader returns the index of the member that leads the Raft group, or
// -1 when no running member knows a leader.
func etcdLeader(t testing.TB, cli *clientv3.Client, e *testcluster.Etcd, members int) int {
	t.Helper()
	for i := 0; i < members; i++ {
		st, err := cli.Status(lockertest.Ctx(t, time.Second), e.Member(i))
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// A leader's renewals survive the loss of the etcd member leading the Raft
// group: within a few attempts Renew succeeds through another endpoint, Lost
// stays open, and the watch behind Lost still works afterwards.
func TestEtcdLeaderKilled(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	cli := rawClient(t, e.Endpoints())
	lease := lockertest.MustAcquire(t, newLocker(t, e.Endpoints(), lockertest.Key(t)))
	if _, err := lease.Renew(lockertest.Ctx(t, time.Second)); err != nil {
		t.Fatalf("Renew before the kill: %v", err)
	}

	victim := -1
	testsupport.WaitFor(t, 10*time.Second, "an etcd leader is known", func() bool {
		victim = etcdLeader(t, cli, e, 3)
		return victim >= 0
	})
	e.Kill(victim)
	killed := time.Now()

	// Each attempt gets 1s, as a supervisor with a short TTL would give.
	const maxAttempts = 6
	attempts := 0
	for {
		attempts++
		_, err := lease.Renew(lockertest.Ctx(t, time.Second))
		if err == nil {
			break
		}
		if errors.Is(err, locker.ErrLost) || attempts == maxAttempts {
			t.Fatalf("Renew attempt %d after killing the etcd leader (member %d): %v", attempts, victim, err)
		}
		t.Logf("Renew attempt %d failed: %v", attempts, err)
	}
	t.Logf("killed etcd leader member %d; Renew succeeded on attempt %d, %v after the kill", victim, attempts, time.Since(killed))
	for i := 0; i < 5; i++ {
		if _, err := lease.Renew(lockertest.Ctx(t, time.Second)); err != nil {
			t.Fatalf("Renew %d after recovery: %v", i, err)
		}
	}
	if testsupport.IsClosed(lease.Lost()) {
		t.Fatalf("Lost closed after a member failure: %s", lease.LostReason())
	}

	// The watch behind Lost survived the failure: a delete is still seen.
	if _, err := cli.Delete(lockertest.Ctx(t, 5*time.Second), lease.(*etcdLease).key); err != nil {
		t.Fatalf("delete: %v", err)
	}
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost still open 5s after our key was deleted on the surviving members")
	}
}

// Without a quorum, Renew fails within its context instead of hanging and
// is not mistaken for a loss; once the quorum is back, renewals work again,
// Lost is still open and still works. Release returns within its context
// even without a quorum.
func TestEtcdQuorumLost(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	cli := rawClient(t, e.Endpoints())
	lease := lockertest.MustAcquire(t, newLocker(t, e.Endpoints(), lockertest.Key(t)))
	loseQuorum := func() {
		e.Kill(1)
		e.Kill(2)
		// A lone former Raft leader renews locally until it notices it
		// lost the quorum (CheckQuorum, one election timeout).
		testsupport.WaitFor(t, 10*time.Second, "member 0 has no leader", func() bool {
			st, err := cli.Status(lockertest.Ctx(t, time.Second), e.Member(0))
			return err == nil && st.Leader == 0
		})
	}

	loseQuorum()
	// Retry as a supervisor would (a failed renewal is retried within a
	// second), for longer than the watch behind Lost needs to notice the
	// missing leader and fail a re-read of our key.
	failures := 0
	pace := time.NewTicker(250 * time.Millisecond)
	defer pace.Stop()
	for outage := time.Now(); time.Since(outage) < 5*time.Second; <-pace.C {
		start := time.Now()
		_, err := lease.Renew(lockertest.Ctx(t, time.Second))
		took := time.Since(start)
		failures++
		if failures == 1 {
			t.Logf("Renew without quorum: %v after %v", err, took)
		}
		if err == nil || errors.Is(err, locker.ErrLost) || errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Renew without quorum = %v, want a plain (retryable) error", err)
		}
		if took > 1500*time.Millisecond {
			t.Fatalf("Renew with a 1s context took %v", took)
		}
	}
	t.Logf("%d renewals failed in time during the outage", failures)
	if testsupport.IsClosed(lease.Lost()) {
		t.Fatalf("Lost closed without a quorum: %s", lease.LostReason())
	}

	e.Restart(1)
	e.Restart(2)
	e.WaitHealthy(t)
	renewed := false
	for i := 0; i < 6 && !renewed; i++ {
		_, err := lease.Renew(lockertest.Ctx(t, time.Second))
		renewed = err == nil
		if errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew after the quorum came back: %v", err)
		}
	}
	if !renewed {
		t.Fatal("Renew still fails after the quorum came back")
	}
	if testsupport.IsClosed(lease.Lost()) {
		t.Fatalf("Lost closed across quorum loss and recovery: %s", lease.LostReason())
	}

	loseQuorum()
	start := time.Now()
	err := lease.Release(lockertest.Ctx(t, time.Second))
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("Release with a 1s context took %v", took)
	}
	if err == nil {
		t.Error("Release without quorum succeeded")
	}
	t.Logf("Release without quorum: %v", err)
}
