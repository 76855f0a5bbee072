package leaserow

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock/fakeclock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// countingMem is a memStore that counts its reads of the lease row and
// its reads of the control record.
type countingMem struct {
	memStore
	rows, controls *atomic.Int64
}

func (s countingMem) Read(ctx context.Context) (Row, error) {
	s.rows.Add(1)
	return s.memStore.Read(ctx)
}

func (s countingMem) ReadControl(ctx context.Context) ([]byte, uint64, error) {
	s.controls.Add(1)
	return s.memStore.ReadControl(ctx)
}

// idleFor moves clock on by d in steps of 100ms, letting the code under
// test run between them. Steps that fire no timer of an idle code under
// test are skipped (fakeclock's Step): every read it makes on its own
// clock still comes on its step.
func idleFor(t *testing.T, clock *fakeclock.Clock, d time.Duration) {
	t.Helper()
	for end := clock.Now().Add(d); clock.Now().Before(end); {
		clock.Step(t, 100*time.Millisecond, end)
	}
	clock.Settle(t)
}

// TestIdleStandbyReadsAtMostOnceASecond: at the default TTL (15s) an idle
// standby reads the row at most once a second (TTL/10, at most 1s): the
// pace at which it sees a release the store does not announce.
func TestIdleStandbyReadsAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	clock := fakeclock.New()
	var rows, controls atomic.Int64
	b := newTestLocker(t, db, "k", "b", func(c *Config) {
		c.Clock, c.Poll, c.TTL = clock, 0, 15*time.Second
		c.Store = countingMem{memStore{db, "k"}, &rows, &controls}
	})
	got := lockertest.AcquireAsync(t, ctx(t), b)
	clock.Settle(t) // b has read the row once
	rows.Store(0)
	idleFor(t, clock, time.Second-200*time.Millisecond)
	if n := rows.Load(); n > 1 {
		t.Fatalf("the standby read the row %d times in less than a second, want at most once", n)
	}
	select {
	case r := <-got:
		t.Fatalf("took the key from a live holder: %+v", r)
	default:
	}
}

// TestIdleControlWaitReadsOncePerRenewInterval: with the default control
// poll, WaitControl on a store without notices probes the record at most
// once per renew interval (TTL/3) while nothing changes, and still
// returns a write after it.
func TestIdleControlWaitReadsOncePerRenewInterval(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	clock := fakeclock.New()
	var rows, controls atomic.Int64
	l := newTestLocker(t, db, "k", "a", func(c *Config) {
		c.Clock, c.ControlPoll = clock, 0
		c.Store = countingMem{memStore{db, "k"}, &rows, &controls}
	})
	cur, err := l.Control(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan locker.Control, 1)
	go func() {
		c, err := l.WaitControl(ctx(t), cur.Version)
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	clock.Settle(t) // the wait has read the record once
	controls.Store(0)
	idleFor(t, clock, testTTL/3-200*time.Millisecond)
	if n := controls.Load(); n > 1 {
		t.Fatalf("WaitControl read the control record %d times in less than a renew interval (%v), want at most once", n, testTTL/3)
	}
	writer := newTestLocker(t, db, "k", "w")
	v, err := writer.SetControl(ctx(t), locker.Control{Version: cur.Version, Pause: &locker.Pause{By: "ops@h", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case c := <-done:
			if c.Version != v || !c.Paused() {
				t.Fatalf("WaitControl = %+v, want the pause at %q", c, v)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("WaitControl never returned the write")
		}
		clock.Step(t, 100*time.Millisecond, time.Time{})
	}
}
