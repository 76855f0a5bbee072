package leaserow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock/fakeclock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// handEdits are the edits of a held row an operator may make by hand,
// as plain SQL makes them: the version stays unless the edit names it.
var handEdits = map[string]func(db *memDB, key string){
	"delete": func(db *memDB, key string) { db.remove(key) },
	"empty term and holder": func(db *memDB, key string) {
		db.editKeep(key, func(r *Row) { r.Term, r.Holder = "", locker.Holder{} })
	},
	"lower ttl": func(db *memDB, key string) {
		db.editKeep(key, func(r *Row) { r.TTL = 100 * time.Millisecond })
	},
	"other term, lower ttl": func(db *memDB, key string) {
		db.editKeep(key, func(r *Row) { r.Term, r.TTL = "by-hand", 100*time.Millisecond })
	},
	"empty, new version": func(db *memDB, key string) {
		db.edit(key, func(r *Row) { r.Term, r.Holder, r.TTL = "", locker.Holder{}, time.Millisecond })
	},
}

// testPoll is newTestLocker's Poll.
const testPoll = 5 * time.Millisecond

// pending fails the test when got has delivered after a few polls of the
// standby's fake clock.
func pending(t *testing.T, clock *fakeclock.Clock, got <-chan lockertest.Acquired, when string) {
	t.Helper()
	for range 3 {
		clock.Settle(t)
		clock.Advance(testPoll)
	}
	clock.Settle(t)
	select {
	case r := <-got:
		t.Fatalf("took the key %s: %+v", when, r)
	default:
	}
}

// awaitAcquired moves the standby's fake clock on, a poll at a time, until
// got delivers, and returns it with how much fake time that took.
func awaitAcquired(t *testing.T, clock *fakeclock.Clock, got <-chan lockertest.Acquired, what string) (lockertest.Acquired, time.Duration) {
	t.Helper()
	t0 := clock.Now()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case r := <-got:
			return r, clock.Now().Sub(t0)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		clock.Step(t, testPoll, time.Time{})
	}
}

// TestHandEditIsAHolderGoneSilent: a standby that saw a live holder takes
// the key after no hand edit of its row before the holder's declared TTL
// plus allowance has passed on its own clock since it saw the edit, and
// the holder's next renewal fails on the edit.
func TestHandEditIsAHolderGoneSilent(t *testing.T) {
	t.Parallel()
	due := testTTL + observe.Allowance(testTTL)
	for name, edit := range handEdits {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newMemDB()
			a := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
			clock := fakeclock.New()
			b := newTestLocker(t, db, "k", "b", func(c *Config) { c.Clock = clock })
			got := lockertest.AcquireAsync(t, ctx(t), b)
			pending(t, clock, got, "from a live holder")
			clock.Advance(due / 2)
			edit(db, "k")
			pending(t, clock, got, "at once after the edit")
			clock.Advance(due - time.Second)
			pending(t, clock, got, "before the holder's TTL after the edit")
			if _, err := a.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) {
				t.Fatalf("the holder's renewal after the edit: %v, want ErrLost", err)
			}
			clock.Advance(1100 * time.Millisecond)
			r, _ := awaitAcquired(t, clock, got, "no takeover once the TTL passed")
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Lease.Epoch() <= a.Epoch() {
				t.Fatalf("epoch %d after %d", r.Lease.Epoch(), a.Epoch())
			}
			lockertest.Release(r.Lease)
		})
	}
}

// TestReleaseIsFreeAtOnce: the holder's own release is taken at once, and
// it is told from an emptied row by its marker.
func TestReleaseIsFreeAtOnce(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	clock := fakeclock.New()
	b := newTestLocker(t, db, "k", "b", func(c *Config) { c.Clock = clock })
	got := lockertest.AcquireAsync(t, ctx(t), b)
	pending(t, clock, got, "from a live holder")
	if err := a.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	r, _ := memStore{db, "k"}.Read(ctx(t))
	if r.Term != "" || r.Contract != Released {
		t.Fatalf("released row: term %q contract %q, want empty and %q", r.Term, r.Contract, Released)
	}
	acq, took := awaitAcquired(t, clock, got, "a released row was not taken")
	if acq.Err != nil {
		t.Fatal(acq.Err)
	}
	lockertest.Release(acq.Lease)
	if took > 2*testPoll {
		t.Fatalf("a released row was taken after %v of the standby's time, want at its next read", took)
	}
}

// TestLateCandidateOnAnEditedKey: a candidate started after the edit
// never saw the holder. It takes a fresh key at once, but waits its own
// TTL on a deleted row the store shows was held, and on a row emptied
// without a release; a single attempt gives up.
func TestLateCandidateOnAnEditedKey(t *testing.T) {
	t.Parallel()
	due := testTTL + observe.Allowance(testTTL)
	for _, name := range []string{"delete", "empty term and holder"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newMemDB()
			al := newTestLocker(t, db, "k", "a")
			a := lockertest.MustAcquire(t, al)
			handEdits[name](db, "k")
			var nu *locker.NeverUsedError
			if _, err := al.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) || errors.As(err, &nu) {
				t.Fatalf("Leader after the edit: %v, want ErrNoLeader, not a key never used", err)
			}
			once := newTestLocker(t, db, "k", "c", func(c *Config) { c.NoWait = true })
			if _, err := once.Acquire(ctx(t)); !errors.Is(err, locker.ErrHeld) || !strings.Contains(err.Error(), "without a release") {
				t.Fatalf("single attempt: %v, want ErrHeld naming the missing release", err)
			}
			clock := fakeclock.New()
			b := newTestLocker(t, db, "k", "b", func(c *Config) { c.Clock = clock })
			got := lockertest.AcquireAsync(t, ctx(t), b)
			pending(t, clock, got, "at once")
			clock.Advance(due - time.Second)
			pending(t, clock, got, "before its TTL")
			clock.Advance(1100 * time.Millisecond)
			r, _ := awaitAcquired(t, clock, got, "no acquire once its TTL passed")
			if r.Err != nil || r.Lease.Epoch() <= a.Epoch() {
				t.Fatalf("%+v after epoch %d", r, a.Epoch())
			}
			lockertest.Release(r.Lease)
		})
	}
	t.Run("fresh key", func(t *testing.T) {
		t.Parallel()
		db := newMemDB()
		ls, err := newTestLocker(t, db, "k", "c", func(c *Config) { c.NoWait = true }).Acquire(ctx(t))
		if err != nil {
			t.Fatalf("a fresh key: %v", err)
		}
		lockertest.Release(ls)
	})
}

// TestReleaseOfAnEditedRowMarksIt: a holder whose row was edited by hand
// still gives it back with the marker once its job is gone, so that
// standbys need not wait.
func TestReleaseOfAnEditedRowMarksIt(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	handEdits["lower ttl"](db, "k")
	if err := a.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if r, _ := (memStore{db, "k"}).Read(ctx(t)); !released(r) {
		t.Fatalf("row after the release: %+v", r)
	}
}
