// Package fakeclock is a clock.Clock for tests that moves only when the
// test says so: Advance fires the timers that came due, Settle waits until
// the code under test stopped using the clock, and Step does both, skipping
// at once over the steps where no timer comes due.
package fakeclock

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock"
)

// Clock is a fake clock.Clock.
type Clock struct {
	mu       sync.Mutex
	now      time.Time
	timers   []*timer
	activity atomic.Int64 // bumped on every use, to tell when the code under test is idle
	fired    bool         // the last Advance fired a timer
}

var _ clock.Clock = (*Clock)(nil)

type timer struct {
	c       *Clock
	when    time.Time
	ch      chan time.Time
	stopped bool
	fired   bool
}

// New is a fake clock at an arbitrary fixed time.
func New() *Clock { return &Clock{now: time.Unix(1_000_000, 0)} }

// Now is the fake time.
func (c *Clock) Now() time.Time {
	c.activity.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer fires once Advance reaches d from now; at once for d <= 0.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	c.activity.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.activity.Add(1)
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// Advance moves time forward by d and fires the timers that came due, in
// order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].when.Before(c.timers[j].when) })
	keep := c.timers[:0]
	c.fired = false
	for _, t := range c.timers {
		switch {
		case t.stopped || t.fired:
		case !t.when.After(c.now):
			t.fired, c.fired = true, true
			t.ch <- t.when
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

// Settle waits until the code under test has not touched the clock for a
// few milliseconds of real time, so the next Advance finds it idle.
func (c *Clock) Settle(t testing.TB) {
	t.Helper()
	last := c.activity.Load()
	quiet := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	for time.Since(quiet) < 10*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("code under test never went idle")
		}
		time.Sleep(time.Millisecond)
		if a := c.activity.Load(); a != last {
			last, quiet = a, time.Now()
		}
	}
}

// Step settles, then moves time on by step, as a loop of Settle and
// Advance(step) would, but without settling before the steps that fire
// nothing: when the next timer is due more than one step away, time moves
// on at once by the whole steps before it (never past until, unless zero),
// and the step that fires it comes after the next Settle. It skips only
// when the code under test was idle through a whole Settle after a move
// that fired nothing (code woken by a timer may be slow to run on a busy
// machine, and must not find the clock seconds on). A clock without timers moves by step: the code may be
// waiting for something real.
func (c *Clock) Step(t testing.TB, step time.Duration, until time.Time) {
	t.Helper()
	before := c.activity.Load()
	c.Settle(t)
	c.mu.Lock()
	var next time.Time
	for _, tm := range c.timers {
		if !tm.stopped && !tm.fired && (next.IsZero() || tm.when.Before(next)) {
			next = tm.when
		}
	}
	n := int64(1)
	idle := !c.fired && c.activity.Load() == before
	if idle && !next.IsZero() && step > 0 {
		// The whole steps that end before next fire nothing.
		idle := int64((next.Sub(c.now) - 1) / step)
		if !until.IsZero() {
			idle = min(idle, int64((until.Sub(c.now)+step-1)/step))
		}
		n = max(idle, 1)
	}
	c.mu.Unlock()
	c.Advance(time.Duration(n) * step)
}

// ticker fires every period of fake time, dropping ticks nobody read, as
// time.Ticker does.
type ticker struct {
	c      *Clock
	mu     sync.Mutex
	period time.Duration
	timer  *timer
	ch     chan time.Time
	done   chan struct{}
}

// NewTicker ticks every d of fake time.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	tk := &ticker{c: c, period: d, ch: make(chan time.Time, 1), done: make(chan struct{})}
	tk.arm()
	return tk
}

func (tk *ticker) arm() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	t := tk.c.NewTimer(tk.period).(*timer)
	tk.timer = t
	done := tk.done
	go func() {
		select {
		case at := <-t.ch:
			select {
			case tk.ch <- at:
			default:
			}
			select {
			case <-done:
			default:
				tk.arm()
			}
		case <-done:
		}
	}()
}

func (tk *ticker) C() <-chan time.Time { return tk.ch }

func (tk *ticker) Stop() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.timer.Stop()
	select {
	case <-tk.done:
	default:
		close(tk.done)
	}
}

func (tk *ticker) Reset(d time.Duration) {
	tk.Stop()
	tk.mu.Lock()
	tk.period, tk.done = d, make(chan struct{})
	tk.mu.Unlock()
	tk.arm()
}

// AfterFunc runs f once the fake time reaches d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.NewTimer(d).(*timer)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.ch:
			f()
		case <-stop:
		}
	}()
	return &after{t: t, stop: stop}
}

type after struct {
	t    *timer
	stop chan struct{}
	once sync.Once
}

func (a *after) C() <-chan time.Time { return nil }
func (a *after) Stop() bool {
	was := a.t.Stop()
	a.once.Do(func() { close(a.stop) })
	return was
}
