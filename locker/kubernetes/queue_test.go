package kubernetes

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueue runs the candidates' queue (queue.go) on a real kube-apiserver.
func TestQueue(t *testing.T) {
	srv := startServer(t)
	t.Run("OnlyTheHeadTries", func(t *testing.T) { testOnlyTheHeadTries(t, srv) })
	t.Run("DeadEntrySkipped", func(t *testing.T) { testDeadEntrySkipped(t, srv) })
	t.Run("DeadEntriesSkippedTogether", func(t *testing.T) { testDeadEntriesTogether(t, srv) })
	t.Run("EntriesGoWithTheCandidate", func(t *testing.T) { testEntriesGo(t, srv) })
}

// renewing renews lease every 500ms, as the supervisor would, until it is
// lost or the test ends.
func renewing(t *testing.T, lease locker.Lease) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-lease.Lost():
				return
			case <-time.After(500 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = lease.Renew(ctx)
			cancel()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// queued counts the entries in the queue of l's Lease.
func queued(t *testing.T, l *Locker) int {
	t.Helper()
	list, err := l.client.List(lockertest.Ctx(t, 5*time.Second), metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// testOnlyTheHeadTries: with a leader and seven standbys, each release by
// handle (as the dead-man guard does after a kill -9) is followed by one
// write to take the Lease in all, from the standby that queued first.
func testOnlyTheHeadTries(t *testing.T, srv *server) {
	const n = 8
	key := lockertest.Key(t)
	ls := make([]*Locker, n)
	for i := range ls {
		ls[i] = srv.newLocker(t, key)
	}
	guard := srv.newLocker(t, key)
	held := mustAcquire(t, ls[0])
	renewing(t, held)
	type won struct {
		i int
		lockertest.Acquired
	}
	wins := make(chan won, n)
	for i := 1; i < n; i++ {
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 2*time.Minute), ls[i])
		go func() { wins <- won{i, <-ch} }()
		// One at a time, so the queue's order is known.
		time.Sleep(300 * time.Millisecond)
	}
	if q := queued(t, ls[0]); q != n-1 {
		t.Errorf("%d candidates in the queue, want %d", q, n-1)
	}
	for round, next := 1, 1; round <= 2; round, next = round+1, next+1 {
		var before int64
		for _, l := range ls {
			before += l.attempts.Load()
		}
		if err := guard.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), held.Handle()); err != nil {
			t.Fatal(err)
		}
		var got won
		select {
		case got = <-wins:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no standby took over within 10s", round)
		}
		if got.Err != nil {
			t.Fatalf("round %d: standby %d: %v", round, got.i, got.Err)
		}
		if got.i != next {
			t.Errorf("round %d: standby %d took over, want %d, the head of the queue", round, got.i, next)
		}
		held = got.Lease
		renewing(t, held)
		time.Sleep(time.Second) // let any other standby wake and try
		var after int64
		for _, l := range ls {
			after += l.attempts.Load()
		}
		t.Logf("round %d: %d writes to take the Lease among %d standbys", round, after-before, n-round)
		if after-before != 1 {
			t.Errorf("round %d: %d writes to take the Lease after the release, want 1 (only the head of the queue)", round, after-before)
		}
		select {
		case a := <-wins:
			t.Fatalf("standby %d returned from Acquire as well: %v", a.i, a.Err)
		default:
		}
	}
}

// testDeadEntrySkipped: a candidate that stopped in the queue (an entry
// nobody renews any more, as a kill -9 leaves it) holds the queue up for
// TTL + allowance after its last write, and its successor deletes it.
func testDeadEntrySkipped(t *testing.T, srv *server) {
	key := lockertest.Key(t)
	a, b := srv.newLocker(t, key), srv.newLocker(t, key)
	la := mustAcquire(t, a)
	renewing(t, la)
	dead, err := a.enqueue(lockertest.Ctx(t, 5*time.Second), newTerm())
	if err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	win := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), b)
	time.Sleep(300 * time.Millisecond)
	if q := queued(t, b); q != 2 {
		t.Errorf("%d entries in the queue, want 2", q)
	}
	if err := la.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	bound := a.ttl + observe.Allowance(a.ttl)
	select {
	case got := <-win:
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		took := got.At.Sub(written)
		t.Logf("b took over %v after the dead entry's last write (bound %v)", took.Round(time.Millisecond), bound)
		if took < bound {
			t.Errorf("b took over %v after the dead entry's last write, before its TTL + allowance %v", took, bound)
		}
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("b did not take over within %v of the dead entry's last write", bound+5*time.Second)
	}
	if _, err := a.client.Get(lockertest.Ctx(t, 5*time.Second), dead.name, metav1.GetOptions{}); err == nil {
		t.Errorf("the dead entry %s is still there", dead.name)
	}
}

// testDeadEntriesTogether: three candidates that stopped in the queue at
// the same moment (a host frozen whole) hold the one behind them up for
// one TTL + allowance, not for one each.
func testDeadEntriesTogether(t *testing.T, srv *server) {
	key := lockertest.Key(t)
	b := srv.newLocker(t, key)
	for range 3 {
		if _, err := b.enqueue(lockertest.Ctx(t, 5*time.Second), newTerm()); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Now()
	bound := b.ttl + observe.Allowance(b.ttl)
	win := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), b)
	select {
	case got := <-win:
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		took := got.At.Sub(written)
		t.Logf("b acquired %v after three entries ahead stopped (TTL + allowance %v)", took.Round(time.Millisecond), bound)
		if took > bound+bound/2 {
			t.Errorf("b acquired %v after three entries ahead stopped together, want within one TTL + allowance (%v)", took, bound)
		}
		lockertest.Release(got.Lease)
	case <-time.After(4*bound + 5*time.Second):
		t.Fatalf("b did not acquire within %v", 4*bound+5*time.Second)
	}
}

// testEntriesGo: a candidate that stops waiting (its context ends) and one
// that wins both leave no entry behind.
func testEntriesGo(t *testing.T, srv *server) {
	key := lockertest.Key(t)
	a, b := srv.newLocker(t, key), srv.newLocker(t, key)
	la := mustAcquire(t, a)
	renewing(t, la)
	if q := queued(t, a); q != 0 {
		t.Errorf("the winner left %d queue entries", q)
	}
	ctx, cancel := context.WithCancel(context.Background())
	win := lockertest.AcquireAsync(t, ctx, b)
	testsupport.WaitFor(t, 10*time.Second, "b's entry", func() bool { return queued(t, b) == 1 })
	cancel()
	if got := <-win; got.Err == nil {
		t.Fatal("b's Acquire returned a lease though its context ended")
	}
	if q := queued(t, a); q != 0 {
		t.Errorf("a cancelled candidate left %d queue entries", q)
	}
}
