package lockertest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Waiting is what CandidatesContract needs of a backend that lists who
// waits for a key (locker.Candidates).
type Waiting[L locker.Locker] struct {
	// New builds a fresh candidate for key with its options changed by
	// opts, closed when the test ends.
	New func(t *testing.T, key string, opts func(*locker.Options)) L
	// Old puts a waiting candidate's entry into the queue of l's key as
	// an older release wrote it, which says neither host, pid, priority
	// nor since, ahead of every candidate to come, and returns its ID;
	// nil where entries are as older releases wrote them.
	Old func(t *testing.T, l L) (id string)
	// Unordered: the candidates win in no order (the local flock), and
	// are listed in the order they began to wait.
	Unordered bool
}

// CandidatesContract checks Candidates on the backend's real server: the
// candidates waiting, the leader excluded, in the order they win, each
// with its host, pid, priority and since; the list moves when the leader
// goes; an older release's entry is listed, undescribed.
func CandidatesContract[L locker.Locker](t *testing.T, w Waiting[L]) {
	t.Run("ListedInOrder", func(t *testing.T) { w.listedInOrder(t) })
	if w.Old != nil {
		t.Run("OlderEntry", func(t *testing.T) { w.olderEntry(t) })
	}
}

// Renewing renews lease every 500ms, as the supervisor would, until it
// is lost, stop is called or the test ends.
func Renewing(t testing.TB, lease locker.Lease) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
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
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return stop
}

func (w Waiting[L]) candidate(t *testing.T, key, id string, priority int) L {
	return w.New(t, key, func(o *locker.Options) { o.ID, o.Priority = id, priority })
}

// list reads the candidates of l's key.
func list(t *testing.T, l locker.Locker) []locker.Candidate {
	t.Helper()
	lc, ok := locker.CandidatesOf(l)
	if !ok {
		t.Fatalf("%T lists no candidates", l)
	}
	cs, err := lc.Candidates(Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Candidates: %v", err)
	}
	if cs == nil {
		t.Fatal("Candidates returned nil, want an empty list when nobody waits")
	}
	return cs
}

// waitListed waits until l's key has n candidates waiting, and returns them.
func waitListed(t *testing.T, l locker.Locker, n int) []locker.Candidate {
	t.Helper()
	var cs []locker.Candidate
	testsupport.WaitFor(t, 20*time.Second, "candidates listed", func() bool {
		cs = list(t, l)
		if len(cs) != n {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	return cs
}

// described checks that c is candidate id of this process at place.
func described(t *testing.T, c locker.Candidate, place int, id string, priority int) {
	t.Helper()
	host, _ := os.Hostname()
	if c.Place != place || c.ID != id || !c.Described || c.Hostname != host || c.PID != os.Getpid() ||
		c.Priority != priority || c.Since.IsZero() || time.Since(c.Since) > 10*time.Minute {
		t.Errorf("candidate %+v, want %s at place %d, on host %s, pid %d, priority %d, waiting since a moment ago",
			c, id, place, host, os.Getpid(), priority)
	}
}

// listedInOrder: a leader and two candidates, b then c: b and c are
// listed in that order, the leader not; once the leader releases and b
// leads, c alone, next.
func (w Waiting[L]) listedInOrder(t *testing.T) {
	key := Key(t)
	leader := w.candidate(t, key, "lead", 0)
	held := MustAcquire(t, leader)
	stop := Renewing(t, held)
	if cs := list(t, leader); len(cs) != 0 {
		t.Fatalf("candidates of a key only its leader campaigns for: %+v", cs)
	}
	ctx := Ctx(t, 2*time.Minute)
	b := AcquireAsync(t, ctx, w.candidate(t, key, "cand-b", 0))
	waitListed(t, leader, 1) // one at a time: the order is known
	c := AcquireAsync(t, ctx, w.candidate(t, key, "cand-c", 7))
	cs := waitListed(t, leader, 2)
	described(t, cs[0], 0, "cand-b", 0)
	described(t, cs[1], 1, "cand-c", 7)

	stop()
	Release(held)
	var got Acquired
	next, prio := "cand-c", 7 // the one left waiting
	select {
	case got = <-b:
	case got = <-c:
		if !w.Unordered {
			t.Fatal("c took over the released key before b, queued ahead of it")
		}
		next, prio = "cand-b", 0
	case <-ctx.Done():
		t.Fatal("nobody took over the released key")
	}
	if got.Err != nil {
		t.Fatalf("Acquire: %v", got.Err)
	}
	Renewing(t, got.Lease)
	cs = waitListed(t, leader, 1)
	described(t, cs[0], 0, next, prio)
}

// olderEntry: an older release's entry ahead of a candidate of today is
// listed first, by its ID alone, and today's behind it, described.
func (w Waiting[L]) olderEntry(t *testing.T) {
	key := Key(t)
	leader := w.candidate(t, key, "lead", 0)
	Renewing(t, MustAcquire(t, leader))
	old := w.Old(t, leader)
	AcquireAsync(t, Ctx(t, 2*time.Minute), w.candidate(t, key, "cand-new", 3))
	cs := waitListed(t, leader, 2)
	if c := cs[0]; c.Place != 0 || c.ID != old || c.Described || c.Hostname != "" || c.PID != 0 || !c.Since.IsZero() {
		t.Errorf("an older release's entry listed as %+v, want %q at place 0, undescribed", c, old)
	}
	described(t, cs[1], 1, "cand-new", 3)
}
