package lockertest

import (
	"context"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Queue is what QueueContract needs of a backend whose waiting candidates
// queue, each following only the one ahead, so that a release wakes only
// the next (DESIGN §1.12, "Who wakes at a failover").
type Queue[L locker.Locker] struct {
	// New builds a fresh candidate for key, closed when the test ends.
	New func(t *testing.T, key string) L
	// TTL is the lease time the candidates ask for.
	TTL time.Duration
	// Attempts counts the candidate's writes that try to take the key.
	Attempts func(l L) int64
	// Queued counts the live entries in the queue of l's key.
	Queued func(t *testing.T, l L) int
	// Stopped puts an entry in the queue of l's key that nobody will
	// write again, as a candidate frozen or killed -9 leaves it, and
	// returns a test of whether it is still there.
	Stopped func(t *testing.T, l L) (present func() bool)
	// Hold keeps a won lease alive as the supervisor would, until the
	// test ends; nil when the lease needs nothing.
	Hold func(t *testing.T, lease locker.Lease)
}

// QueueContract checks a backend's candidates' queue on its real server:
// only the head tries after a release, a stopped entry holds the queue up
// for TTL + allowance and no more (one at a time or several at once), and
// candidates leave no entry behind.
func QueueContract[L locker.Locker](t *testing.T, q Queue[L]) {
	t.Run("OnlyTheHeadTries", func(t *testing.T) { q.onlyTheHeadTries(t) })
	t.Run("DeadEntrySkipped", func(t *testing.T) { q.deadEntrySkipped(t) })
	t.Run("DeadEntriesSkippedTogether", func(t *testing.T) { q.deadEntriesTogether(t) })
	t.Run("EntriesGoWithTheCandidate", func(t *testing.T) { q.entriesGo(t) })
}

func (q Queue[L]) hold(t *testing.T, lease locker.Lease) {
	if q.Hold != nil {
		q.Hold(t, lease)
	}
}

func (q Queue[L]) bound() time.Duration { return q.TTL + observe.Allowance(q.TTL) }

// onlyTheHeadTries: with a leader and seven standbys, each release by
// handle (as the dead-man guard does after a kill -9) is followed by one
// attempt to take the key in all, from the standby that queued first.
func (q Queue[L]) onlyTheHeadTries(t *testing.T) {
	const n = 8
	key := Key(t)
	ls := make([]L, n)
	for i := range ls {
		ls[i] = q.New(t, key)
	}
	guard := q.New(t, key)
	held := MustAcquire(t, ls[0])
	q.hold(t, held)
	type won struct {
		i int
		Acquired
	}
	wins := make(chan won, n)
	for i := 1; i < n; i++ {
		ch := AcquireAsync(t, Ctx(t, 2*time.Minute), ls[i])
		go func() { wins <- won{i, <-ch} }()
		// One at a time, so the queue's order is known.
		testsupport.WaitFor(t, 10*time.Second, "the standby's entry", func() bool { return q.Queued(t, ls[0]) == i })
	}
	time.Sleep(300 * time.Millisecond) // every standby follows the one ahead
	attempts := func() (sum int64) {
		for _, l := range ls {
			sum += q.Attempts(l)
		}
		return sum
	}
	for round, next := 1, 1; round <= 2; round, next = round+1, next+1 {
		before := attempts()
		if err := guard.ReleaseHandle(Ctx(t, 5*time.Second), held.Handle()); err != nil {
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
		q.hold(t, held)
		time.Sleep(time.Second) // let any other standby wake and try
		tries := attempts() - before
		t.Logf("round %d: %d attempts to take the key among %d standbys", round, tries, n-round)
		if tries != 1 {
			t.Errorf("round %d: %d attempts to take the key after the release, want 1 (only the head of the queue)", round, tries)
		}
		select {
		case a := <-wins:
			t.Fatalf("standby %d returned from Acquire as well: %v", a.i, a.Err)
		default:
		}
	}
}

// deadEntrySkipped: a candidate that stopped in the queue holds it up for
// TTL + allowance after its last write, and its successor deletes it.
func (q Queue[L]) deadEntrySkipped(t *testing.T) {
	key := Key(t)
	a, b := q.New(t, key), q.New(t, key)
	la := MustAcquire(t, a)
	q.hold(t, la)
	present := q.Stopped(t, a)
	written := time.Now()
	win := AcquireAsync(t, Ctx(t, time.Minute), b)
	testsupport.WaitFor(t, 10*time.Second, "b's entry behind the stopped one", func() bool { return q.Queued(t, b) == 2 })
	if err := la.Release(Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	bound := q.bound()
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
		Release(got.Lease)
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("b did not take over within %v of the dead entry's last write", bound+5*time.Second)
	}
	if present() {
		t.Error("the dead entry is still there")
	}
}

// deadEntriesTogether: three candidates that stopped in the queue at the
// same moment (a host frozen whole) hold the one behind them up for one
// TTL + allowance, not for one each.
func (q Queue[L]) deadEntriesTogether(t *testing.T) {
	key := Key(t)
	b := q.New(t, key)
	for range 3 {
		q.Stopped(t, b)
	}
	written := time.Now()
	bound := q.bound()
	win := AcquireAsync(t, Ctx(t, time.Minute), b)
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
		Release(got.Lease)
	case <-time.After(4*bound + 5*time.Second):
		t.Fatalf("b did not acquire within %v", 4*bound+5*time.Second)
	}
}

// entriesGo: a candidate that stops waiting (its context ends) and one
// that wins both leave no entry behind.
func (q Queue[L]) entriesGo(t *testing.T) {
	key := Key(t)
	a, b := q.New(t, key), q.New(t, key)
	la := MustAcquire(t, a)
	q.hold(t, la)
	if n := q.Queued(t, a); n != 0 {
		t.Errorf("the winner left %d queue entries", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	win := AcquireAsync(t, ctx, b)
	testsupport.WaitFor(t, 10*time.Second, "b's entry", func() bool { return q.Queued(t, b) == 1 })
	cancel()
	if got := <-win; got.Err == nil {
		t.Fatal("b's Acquire returned a lease though its context ended")
	}
	if n := q.Queued(t, a); n != 0 {
		t.Errorf("a cancelled candidate left %d queue entries", n)
	}
	Release(la)
}

// OnlyTheHeadTakes follows a release with a head and a later candidate
// waiting: the head's Acquire must win within 15s, and a second later the
// later candidate must have sent no attempt for the key (as one that
// campaigned without the queue would). It returns the head's lease.
func OnlyTheHeadTakes(t *testing.T, headWon, lateWon <-chan Acquired, lateAttempts func() int64) locker.Lease {
	t.Helper()
	var lease locker.Lease
	select {
	case got := <-headWon:
		if got.Err != nil {
			t.Fatalf("the head: %v", got.Err)
		}
		lease = got.Lease
	case got := <-lateWon:
		t.Fatalf("the candidate that queued second took the key (err %v)", got.Err)
	case <-time.After(15 * time.Second):
		t.Fatal("no candidate took the released key")
	}
	time.Sleep(time.Second)
	if n := lateAttempts(); n != 0 {
		t.Errorf("the candidate behind the head sent %d attempts for the key after the release, want 0 (it campaigned without the queue)", n)
	}
	return lease
}
