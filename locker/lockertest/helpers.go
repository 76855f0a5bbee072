package lockertest

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// Key turns the test's name into a leadership key that every backend
// accepts and no other test uses.
func Key(t testing.TB) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '-'
	}, t.Name())
}

// DebugLogger is a debug-level logger on stderr named name when
// LEADERRUN_TEST_DEBUG is set, and nil (the backend's silent default)
// otherwise.
func DebugLogger(name string) hclog.Logger {
	if os.Getenv("LEADERRUN_TEST_DEBUG") == "" {
		return nil
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: os.Stderr})
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// MustAcquire acquires within 20s or fails the test; the lease is released
// when the test ends.
func MustAcquire(t testing.TB, l locker.Locker) locker.Lease {
	t.Helper()
	return MustAcquireWithin(t, l, 20*time.Second)
}

// MustAcquireWithin is MustAcquire with d in place of 20s.
func MustAcquireWithin(t testing.TB, l locker.Locker, d time.Duration) locker.Lease {
	t.Helper()
	lease, err := l.Acquire(Ctx(t, d))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { Release(lease) })
	return lease
}

// Release releases lease within 3s, ignoring errors; for cleanups.
func Release(lease locker.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	lease.Release(ctx)
}

// Acquired is the outcome of an Acquire run in the background.
type Acquired struct {
	Lease locker.Lease
	Err   error
	At    time.Time // when Acquire returned
}

// AcquireAsync runs Acquire in a goroutine; the result arrives on the
// channel. When the test ends, a still waiting Acquire is cancelled and a
// lease it won is released.
func AcquireAsync(t testing.TB, ctx context.Context, l locker.Locker) <-chan Acquired {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan Acquired, 1)
	done := make(chan struct{})
	var won locker.Lease
	go func() {
		defer close(done)
		lease, err := l.Acquire(ctx)
		won = lease
		ch <- Acquired{lease, err, time.Now()}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if won != nil {
			Release(won)
		}
	})
	return ch
}

// Open applies mods to cfg in order, builds a Locker from it with the
// backend's New, or fails the test, and closes it when the test ends.
func Open[C any, L locker.Locker](t testing.TB, newLocker func(C) (L, error), cfg C, mods ...func(*C)) L {
	t.Helper()
	for _, m := range mods {
		m(&cfg)
	}
	l, err := newLocker(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// NeverUsed checks Leader's two answers for a free key on a real backend:
// l's key, which nothing has used, is a *locker.NeverUsedError that also
// matches ErrNoLeader and whose Where contains each of where; once use has
// acquired and released it, Leader says ErrNoLeader and not ErrNeverUsed.
func NeverUsed(t testing.TB, l locker.Locker, use func(), where ...string) {
	t.Helper()
	_, err := l.Leader(Ctx(t, 10*time.Second))
	var nu *locker.NeverUsedError
	if !errors.As(err, &nu) || !errors.Is(err, locker.ErrNoLeader) || !errors.Is(err, locker.ErrNeverUsed) {
		t.Fatalf("Leader of a key never used = %v, want a *locker.NeverUsedError", err)
	}
	for _, w := range where {
		if !strings.Contains(nu.Where, w) {
			t.Errorf("never used: Where %q does not name %q", nu.Where, w)
		}
	}
	if len(nu.Fields) == 0 {
		t.Errorf("never used: no Fields name the settings that chose %q", nu.Where)
	}
	use()
	if _, err := l.Leader(Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrNoLeader) || errors.Is(err, locker.ErrNeverUsed) {
		t.Fatalf("Leader after one acquire and release = %v, want ErrNoLeader and not ErrNeverUsed", err)
	}
}

// ObserverTakeover checks the observer-clock takeover of a backend whose
// records do not expire by themselves (DESIGN §1.12): a standby (standby)
// never takes over from a holder (holder, held by the first Locker) that
// keeps renewing; once the renewals stop, it takes over no sooner than the
// TTL plus the allowance after the last renewal was sent, with a higher
// epoch, and the old holder's next Renew is a loss. ttl is the Lockers'.
func ObserverTakeover(t *testing.T, holder, standby locker.Locker, ttl time.Duration) {
	t.Helper()
	old := MustAcquire(t, holder)
	got := AcquireAsync(t, Ctx(t, 10*ttl), standby)
	var last time.Time
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		last = time.Now()
		if _, err := old.Renew(Ctx(t, ttl)); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			t.Fatalf("standby took over a holder that renews: %+v", r)
		default:
		}
	}
	var r Acquired
	select {
	case r = <-got:
	case <-time.After(3 * ttl):
		t.Fatal("no takeover")
	}
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	defer Release(r.Lease)
	took := r.At.Sub(last)
	t.Logf("takeover %v after the last renewal was sent (TTL %v + allowance %v)", took, ttl, observe.Allowance(ttl))
	if took < ttl+observe.Allowance(ttl) {
		t.Fatalf("takeover %v after the last renewal, before TTL + allowance", took)
	}
	if r.Lease.Epoch() <= old.Epoch() {
		t.Fatalf("takeover epoch %d not above %d", r.Lease.Epoch(), old.Epoch())
	}
	if _, err := old.Renew(Ctx(t, ttl)); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("old holder's Renew after takeover: %v, want ErrLost", err)
	}
}

// Cycles runs n cycles of acquire, renewals renewals and release on l and
// returns how long each acquire and each renewal took.
func Cycles(t *testing.T, l locker.Locker, n, renewals int) (acquires, renews []time.Duration) {
	t.Helper()
	for range n {
		s := time.Now()
		ls, err := l.Acquire(Ctx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		acquires = append(acquires, time.Since(s))
		for range renewals {
			s = time.Now()
			if _, err := ls.Renew(Ctx(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			renews = append(renews, time.Since(s))
		}
		if err := ls.Release(Ctx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	return acquires, renews
}

// Median is the median and the 99th percentile of d (sorted in place).
func Median(d []time.Duration) (median, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// RateClock runs at Rate times real time from Start: the clock of a
// standby whose oscillator is fast (Rate > 1) or slow.
type RateClock struct {
	Start time.Time
	Rate  float64
}

// Now is the clock's reading.
func (c RateClock) Now() time.Time {
	return c.Start.Add(time.Duration(float64(time.Since(c.Start)) * c.Rate))
}

// StandbyClockRates checks an observer-clock backend against a standby
// whose clock runs 5% fast or 5% slow (within what the allowance covers
// at ttl 2s: 250ms): it takes over a holder that stopped renewing no
// earlier than the TTL after the holder's last renewal, in real time. One
// 30% fast (far beyond it) would, which shows the check can fail. open
// returns, for a key of its own each call, a holder and a standby whose
// watch reads now; both have TTL ttl.
func StandbyClockRates(t *testing.T, ttl time.Duration, open func(now func() time.Time) (holder, standby locker.Locker)) {
	t.Helper()
	for _, tc := range []struct {
		rate  float64
		early bool
	}{{1.05, false}, {0.95, false}, {1.3, true}} {
		holder, standby := open(RateClock{time.Now(), tc.rate}.Now)
		ls := MustAcquire(t, holder)
		if _, err := ls.Renew(Ctx(t, ttl)); err != nil {
			t.Fatal(err)
		}
		lastSend := time.Now() // after the renewal's send: errs late, against the test
		r := <-AcquireAsync(t, Ctx(t, 10*ttl), standby)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		Release(r.Lease)
		took := r.At.Sub(lastSend)
		t.Logf("standby clock rate %.2f: took over %v after the last renewal (TTL %v)", tc.rate, took.Round(time.Millisecond), ttl)
		if early := took < ttl; early != tc.early {
			t.Errorf("rate %.2f: took over %v after the last renewal; early = %v, want %v", tc.rate, took, early, tc.early)
		}
	}
}

// KeySlot is the key and the slot of name, a key or one of its slot keys
// as a backend holds it (locker.SplitSlotKey), for the Options of a
// NewLocker given that name; a name that is neither is returned as the
// key of slot 0, for the backend to refuse.
func KeySlot(name string) (key string, slot int) {
	if key, slot, ok := locker.SplitSlotKey(name); ok {
		return key, slot
	}
	return name, 0
}
