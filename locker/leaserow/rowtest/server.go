package rowtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// ByHand is the hand edit Server.Edit makes, besides those of Edits, for
// the holder's next renewal: the TTL set to 100ms and the version to
// "by-hand", as an operator who also moves the version would.
const ByHand = "by-hand"

// Stored is the lease row as the server keeps it, read with a plain
// client.
type Stored struct {
	Version  string
	Epoch    uint64
	Contract string
	TTL      time.Duration
}

// Server is what ServerContract needs of a lease-row backend's tests on
// its real server. Its Lockers have a TTL of 2s.
type Server struct {
	// Open builds a candidate for key with the tests' defaults (its own
	// ID), Options.NoWait set to noWait, closed when the test ends.
	Open func(t *testing.T, key string, noWait bool) *leaserow.Locker

	// Row reads key's lease row with a plain client; it may check more of
	// what the backend keeps beside it (an epoch counter).
	Row func(t *testing.T, key string) Stored

	// Edit makes a hand edit of key's row (Delete, Empty, LowerTTL or
	// ByHand).
	Edit func(t *testing.T, key, kind string)

	// Unreachable builds a single-attempt candidate for key whose server
	// is not there (a closed port at UnreachableAddr) with a call timeout
	// of 2s.
	Unreachable     func(t *testing.T, key string) *leaserow.Locker
	UnreachableAddr string
}

// ServerContract runs the scenarios every lease-row backend keeps on its
// real server, each a subtest on a key of its own: the row as acquire,
// renew and release leave it; the observer-clock takeover; hand edits
// and deletes are losses, and the epoch outlives a deleted row; an
// unreachable server is a retryable failure; and the run log, history
// and control contracts.
func ServerContract(t *testing.T, s Server) {
	const ttl = 2 * time.Second
	ctx := func(t *testing.T) context.Context { return lockertest.Ctx(t, 20*time.Second) }
	t.Run("AcquireRenewReleaseOnTheServer", func(t *testing.T) {
		key := lockertest.Key(t)
		a := s.Open(t, key, false)
		ls := lockertest.MustAcquire(t, a)
		r1 := s.Row(t, key)
		if r1.Epoch != ls.Epoch() || r1.Contract != observe.Contract || r1.TTL != ttl {
			t.Fatalf("row after acquire: %+v; lease epoch %d", r1, ls.Epoch())
		}
		if got, err := ls.Renew(ctx(t)); err != nil || got != ttl {
			t.Fatalf("Renew = %v, %v", got, err)
		}
		if r2 := s.Row(t, key); r2.Version == r1.Version || r2.Epoch != r1.Epoch {
			t.Fatalf("renewal: version %q -> %q, epoch %d -> %d; want a new version, the same epoch", r1.Version, r2.Version, r1.Epoch, r2.Epoch)
		}
		b := s.Open(t, key, true)
		if _, err := b.Acquire(ctx(t)); !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("NoWait while held: %v, want ErrHeld", err)
		}
		h, err := b.Leader(ctx(t))
		if err != nil || h.ID != a.ID() || h.Epoch != ls.Epoch() {
			t.Fatalf("Leader = %+v, %v", h, err)
		}
		if err := ls.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) {
			t.Fatalf("Leader after release: %v, want ErrNoLeader", err)
		}
		ls2 := lockertest.MustAcquire(t, b)
		if ls2.Epoch() <= ls.Epoch() {
			t.Fatalf("re-acquire epoch %d not above %d", ls2.Epoch(), ls.Epoch())
		}
	})
	// A holder that renews is never taken over; once it stops, the
	// standby takes over no earlier than TTL + allowance after the last
	// renewal, with a higher epoch, and the old holder's next renewal is
	// a loss.
	t.Run("TakeoverOnlyAfterTTLAndAllowance", func(t *testing.T) {
		key := lockertest.Key(t)
		lockertest.ObserverTakeover(t, s.Open(t, key, false), s.Open(t, key, false), ttl)
	})
	t.Run("HandEditedRowIsLost", func(t *testing.T) {
		key := lockertest.Key(t)
		ls := lockertest.MustAcquire(t, s.Open(t, key, false))
		s.Edit(t, key, ByHand)
		if _, err := ls.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) || !strings.Contains(err.Error(), "someone else") {
			t.Fatalf("Renew after a hand edit: %v, want ErrLost", err)
		}
	})
	// A row deleted by hand and created again still gets a larger epoch
	// (what counts is kept apart from the row), and epochs grow across
	// the guard's release and a re-acquire.
	t.Run("EpochSurvivesDeletedRow", func(t *testing.T) {
		key := lockertest.Key(t)
		a := s.Open(t, key, false)
		first := lockertest.MustAcquire(t, a)
		s.Edit(t, key, Delete)
		if _, err := first.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) || !strings.Contains(err.Error(), "deleted") {
			t.Fatalf("Renew of a deleted row: %v, want ErrLost", err)
		}
		second := lockertest.MustAcquire(t, s.Open(t, key, false))
		if second.Epoch() <= first.Epoch() {
			t.Fatalf("epoch after the row was deleted: %d, not above %d", second.Epoch(), first.Epoch())
		}
		// The guard's release, through the handle, in another process's
		// Locker.
		if err := s.Open(t, key, false).ReleaseHandle(ctx(t), second.Handle()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) {
			t.Fatalf("Leader after ReleaseHandle: %v, want ErrNoLeader", err)
		}
		third := lockertest.MustAcquire(t, a)
		if third.Epoch() <= second.Epoch() {
			t.Fatalf("re-acquire after the release: epoch %d, not above %d", third.Epoch(), second.Epoch())
		}
	})
	// A server that is not there fails the call within the call timeout
	// (and a margin for a loaded machine), as an error worth retrying.
	t.Run("UnreachableIsRetryable", func(t *testing.T) {
		l := s.Unreachable(t, lockertest.Key(t))
		start := time.Now()
		_, err := l.Acquire(ctx(t))
		if took := time.Since(start); err == nil || errors.Is(err, locker.ErrRefused) || took > 10*time.Second || !strings.Contains(err.Error(), s.UnreachableAddr) {
			t.Fatalf("Acquire on a closed port: %v after %v", err, took)
		}
		if addr, timeout := l.Target(); addr != s.UnreachableAddr || timeout != 2*time.Second {
			t.Fatalf("Target = %s, %v", addr, timeout)
		}
	})
	open := func(t *testing.T, key string) locker.Locker { return s.Open(t, key, false) }
	t.Run("RunLog", func(t *testing.T) { lockertest.RunLogContract(t, open) })
	t.Run("History", func(t *testing.T) { lockertest.HistoryContract(t, open) })
	t.Run("Control", func(t *testing.T) { lockertest.ControlContract(t, open) })
}

// Lock is the core lock contract (lockertest.LockContract) on s's
// server; the hand delete is Edit's Delete.
func (s Server) Lock() lockertest.Lock {
	return lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker { return s.Open(t, key, noWait) },
		Delete: func(t *testing.T, key string, _ locker.Locker, _ locker.Lease) {
			s.Edit(t, key, Delete)
		},
	}
}
