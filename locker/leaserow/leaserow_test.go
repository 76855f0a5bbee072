package leaserow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/internal/clock/fakeclock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
)

const testTTL = 10 * time.Second

// testControlPoll is the tests' pace of WaitControl's reads: the control
// contract's waits scale with it (lockertest.ControlContractPoll).
const testControlPoll = 20 * time.Millisecond

func newTestLocker(t *testing.T, db *memDB, key, id string, mods ...func(*Config)) *Locker {
	t.Helper()
	k, slot := lockertest.KeySlot(key)
	cfg := Config{Options: locker.Options{Key: k, Slot: slot, ID: id, TTL: testTTL}, Store: memStore{db, key}, Name: "mem", Poll: 5 * time.Millisecond, ControlPoll: testControlPoll}
	for _, m := range mods {
		m(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ctx(t *testing.T) context.Context { return lockertest.Ctx(t, 10*time.Second) }

func TestAcquireCreatesThenHeld(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	ls := lockertest.MustAcquire(t, a)
	if ls.Epoch() != 1 {
		t.Fatalf("first epoch %d, want 1", ls.Epoch())
	}
	b := newTestLocker(t, db, "k", "b", func(c *Config) { c.NoWait = true })
	if _, err := b.Acquire(ctx(t)); !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("second candidate with NoWait: %v, want ErrHeld", err)
	}
	h, err := b.Leader(ctx(t))
	if err != nil || h.ID != "a" || h.Epoch != 1 {
		t.Fatalf("Leader = %+v, %v; want a at epoch 1", h, err)
	}
	r, _ := memStore{db, "k"}.Read(ctx(t))
	if r.Contract != observe.Contract || r.TTL != testTTL {
		t.Fatalf("row declares %q %v, want the contract and the TTL", r.Contract, r.TTL)
	}
}

func TestRenewIsConditionedOnOurLastWrite(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	ls := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	before, _ := memStore{db, "k"}.Read(ctx(t))
	if got, err := ls.Renew(ctx(t)); err != nil || got != testTTL {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	after, _ := memStore{db, "k"}.Read(ctx(t))
	if after.Version == before.Version || after.Epoch != before.Epoch {
		t.Fatalf("renewal left version %q (was %q), epoch %d (was %d)", after.Version, before.Version, after.Epoch, before.Epoch)
	}
	// A hand edit that keeps our term is a loss: standbys count from it.
	db.edit("k", func(r *Row) { r.TTL = time.Second })
	if _, err := ls.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after a hand edit: %v, want ErrLost", err)
	}
	select {
	case <-ls.Lost():
	default:
		t.Fatal("Lost not closed after the loss")
	}
	if _, err := ls.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after the loss: %v, want ErrLost", err)
	}
}

func TestRenewAdoptsOwnWriteWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	ls := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	db.lostAnswer = true
	if _, err := ls.Renew(ctx(t)); err == nil || errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew whose answer was lost: %v, want a retryable error", err)
	}
	if _, err := ls.Renew(ctx(t)); err == nil || errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew meeting our own earlier write: %v, want a failed attempt, not a loss", err)
	}
	if _, err := ls.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew after adopting: %v", err)
	}
}

func TestTakeoverOnlyAfterTTLAndAllowanceOnOurClock(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	old := lockertest.MustAcquire(t, a)
	clock := fakeclock.New()
	b := newTestLocker(t, db, "k", "b", func(c *Config) { c.Clock = clock })
	got := lockertest.AcquireAsync(t, ctx(t), b)
	due := testTTL + observe.Allowance(testTTL)

	pending(t, clock, got, "from a live holder") // b has seen the row
	clock.Advance(due - 200*time.Millisecond)
	pending(t, clock, got, "before TTL + allowance")
	// A renewal starts the wait over.
	if _, err := old.Renew(ctx(t)); err != nil {
		t.Fatal(err)
	}
	pending(t, clock, got, "right after a renewal") // b has seen it
	clock.Advance(due - 200*time.Millisecond)
	pending(t, clock, got, "from a holder that renewed")
	clock.Advance(250 * time.Millisecond)
	r, _ := awaitAcquired(t, clock, got, "no takeover after TTL + allowance unchanged")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	defer lockertest.Release(r.Lease)
	if r.Lease.Epoch() <= old.Epoch() {
		t.Fatalf("takeover epoch %d not above %d", r.Lease.Epoch(), old.Epoch())
	}
	if _, err := old.Renew(ctx(t)); !errors.Is(err, locker.ErrLost) || !strings.Contains(err.Error(), `taken over by "b"`) {
		t.Fatalf("old holder's Renew after the takeover: %v, want ErrLost naming b", err)
	}
	// The old holder's release leaves the new holder's row alone.
	if err := old.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if h, err := b.Leader(ctx(t)); err != nil || h.ID != "b" {
		t.Fatalf("Leader after the old holder's release = %+v, %v", h, err)
	}
}

func TestHolderWithoutContractIsOnlyWaitedFor(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	db.rows["k"] = &Row{Term: "other", Holder: locker.Holder{ID: "other-tool"}, TTL: time.Second, Epoch: 5, Version: "v1"}
	db.counter = 5
	clock := fakeclock.New()
	b := newTestLocker(t, db, "k", "b", func(c *Config) { c.Clock = clock })
	got := lockertest.AcquireAsync(t, ctx(t), b)
	pending(t, clock, got, "at once")
	clock.Advance(time.Hour)
	pending(t, clock, got, "from a holder without the contract, an hour on")
	db.edit("k", func(r *Row) { r.Term, r.Holder = "", locker.Holder{} })
	r, _ := awaitAcquired(t, clock, got, "a freed row was not taken")
	if r.Err != nil || r.Lease.Epoch() != 6 {
		t.Fatalf("after the release: %+v, want epoch 6", r)
	}
	lockertest.Release(r.Lease)
}

func TestEpochGrowsAcrossReleaseAndReacquire(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	var last uint64
	for i := range 3 {
		ls, err := a.Acquire(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if ls.Epoch() <= last {
			t.Fatalf("acquire %d: epoch %d not above %d", i, ls.Epoch(), last)
		}
		last = ls.Epoch()
		if i == 1 {
			// Released by the guard, through the handle.
			if err := a.ReleaseHandle(ctx(t), ls.Handle()); err != nil {
				t.Fatal(err)
			}
		} else if err := ls.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) {
			t.Fatalf("Leader after release: %v, want ErrNoLeader", err)
		}
	}
	if err := a.ReleaseHandle(ctx(t), "other-key abc"); !errors.Is(err, locker.ErrRefused) {
		t.Fatalf("ReleaseHandle of another key's handle: %v, want ErrRefused", err)
	}
}

func TestEpochThatWentBackIsRefused(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	ls := lockertest.MustAcquire(t, a)
	if err := ls.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	db.rows["k"].Epoch = 9 // the last holder's epoch, above what the counter gives next
	db.mu.Unlock()
	if _, err := a.Acquire(ctx(t)); !errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), "not greater") {
		t.Fatalf("Acquire with an epoch counter behind the row: %v, want ErrRefused", err)
	}
	if _, err := a.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("the refused acquire left the row held: %v", err)
	}
}

func TestRecordRunNeedsTheRow(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	ls := lockertest.MustAcquire(t, a)
	run := locker.NewRun(locker.Options{ID: "a"}, "s1", locker.RunSucceeded, ls.Epoch(), time.Hour)
	db.edit("k", func(r *Row) { r.Term = "someone-else" })
	if err := a.RecordRun(ctx(t), ls, run); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("RecordRun after the row changed hands: %v, want ErrLost", err)
	}
}

func TestRunLogContractInMemory(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	lockertest.RunLogContractLifetime(t, 500*time.Millisecond, func(t *testing.T, key string) locker.Locker {
		return newTestLocker(t, db, key, "c")
	})
}

func TestHistoryContractInMemory(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return newTestLocker(t, db, key, "c")
	})
}

// rateClock runs rate times as fast as base, from start: the clock of a
// standby whose oscillator is fast (rate > 1) or slow, on fake time.
type rateClock struct {
	base  *fakeclock.Clock
	start time.Time
	rate  float64
}

func (c rateClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(c.base.Now().Sub(c.start)) * c.rate))
}
func (c rateClock) scale(d time.Duration) time.Duration { return time.Duration(float64(d) / c.rate) }
func (c rateClock) NewTimer(d time.Duration) clock.Timer {
	return c.base.NewTimer(c.scale(d))
}
func (c rateClock) NewTicker(d time.Duration) clock.Ticker {
	return c.base.NewTicker(c.scale(d))
}
func (c rateClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.base.AfterFunc(c.scale(d), f)
}

// TestFastStandbyClockNeverTakesOverEarly: a standby whose clock runs 5%
// fast or slow takes over no earlier than the holder's TTL after its last
// renewal, in the holder's time; one 30% fast would. This is
// lockertest.StandbyClockRates (which the backends run in real time) on
// fake time: the standby's watch and its polls run on its own clock.
func TestFastStandbyClockNeverTakesOverEarly(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		rate  float64
		early bool
	}{{1.05, false}, {0.95, false}, {1.3, true}} {
		fc := fakeclock.New()
		db := newMemDB()
		holder := newTestLocker(t, db, "k", "a", func(c *Config) { c.TTL = ttl })
		standby := newTestLocker(t, db, "k", "b", func(c *Config) {
			// A poll as long as the TTL: the standby still wakes when its
			// count says the key is free, and reads less in between.
			c.TTL, c.Poll, c.Clock = ttl, ttl, rateClock{fc, fc.Now(), tc.rate}
		})
		ls := lockertest.MustAcquire(t, holder)
		if _, err := ls.Renew(ctx(t)); err != nil {
			t.Fatal(err)
		}
		lastSend := fc.Now()
		// The fake time when Acquire returned.
		type acquired struct {
			ls  locker.Lease
			err error
			at  time.Time
		}
		got := make(chan acquired, 1)
		actx := ctx(t)
		go func() {
			ls, err := standby.Acquire(actx)
			got <- acquired{ls, err, fc.Now()}
		}()
		var r acquired
		for done := false; !done; {
			select {
			case r = <-got:
				done = true
				continue
			default:
			}
			if fc.Now().Sub(lastSend) > 10*ttl {
				t.Fatalf("rate %.2f: no takeover 10 TTLs after the last renewal", tc.rate)
			}
			fc.Step(t, 10*time.Millisecond, time.Time{})
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		lockertest.Release(r.ls)
		took := r.at.Sub(lastSend)
		t.Logf("standby clock rate %.2f: took over %v after the last renewal (TTL %v)", tc.rate, took, ttl)
		if early := took < ttl; early != tc.early {
			t.Errorf("rate %.2f: took over %v after the last renewal; early = %v, want %v", tc.rate, took, early, tc.early)
		}
	}
}

// TestClaimWhoseAnswerWasLost: a claim written but answered with an
// error is read back and is the leadership, not a row left to wait out.
func TestClaimWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	a := newTestLocker(t, db, "k", "a")
	db.lostTake = true
	first := lockertest.MustAcquire(t, a)
	if err := first.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	db.lostTake = true
	ls, err := a.Acquire(lockertest.Ctx(t, 2*time.Second))
	if err != nil {
		t.Fatalf("Acquire whose take lost its answer: %v", err)
	}
	defer lockertest.Release(ls)
	if ls.Epoch() <= first.Epoch() {
		t.Fatalf("epoch %d after %d", ls.Epoch(), first.Epoch())
	}
	if _, _, ok := ls.(locker.Confirmed).Confirmation(); ok {
		t.Error("a claim whose answer was lost stands for the confirm; the supervisor must renew first")
	}
	if _, err := ls.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew of the adopted claim: %v", err)
	}
}

// TestAnsweredClaimIsTheConfirm: an answered claim wrote the whole row
// under a new version, as a renewal does, so its send time stands for the
// supervisor's confirm (locker.Confirmed), once, with the TTL.
func TestAnsweredClaimIsTheConfirm(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	before := time.Now()
	ls := lockertest.MustAcquire(t, newTestLocker(t, db, "k", "a"))
	after := time.Now()
	sent, granted, ok := ls.(locker.Confirmed).Confirmation()
	if !ok || sent.Before(before) || sent.After(after) || granted != testTTL {
		t.Fatalf("Confirmation = %v after the call, %v, %v; want a send within the acquire, the TTL %v, true", sent.Sub(before), granted, ok, testTTL)
	}
	if _, _, again := ls.(locker.Confirmed).Confirmation(); again {
		t.Fatal("Confirmation answered twice")
	}
}

// TestControlContract runs the contract on the in-memory store: the core's
// part (versions, conflicts, the poll of WaitControl). The backends run it
// on their servers.
func TestControlContract(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	lockertest.ControlContractPoll(t, testControlPoll, func(t *testing.T, key string) locker.Locker {
		return newTestLocker(t, db, key, "c")
	})
}

func TestControlVersions(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"": true, "1": true, "42": true, "0": false, "01": false, "-1": false, "x": false,
		"9223372036854775807": false, "9223372036854775806": true} {
		if _, ok := ParseControlVersion(v); ok != want {
			t.Errorf("ParseControlVersion(%q) ok = %v, want %v", v, ok, want)
		}
	}
}
