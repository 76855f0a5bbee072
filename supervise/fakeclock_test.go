package supervise

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when the test says so.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	timers   []*fakeTimer
	activity atomic.Int64 // bumped on every use, to tell when the code under test is idle
}

type fakeTimer struct {
	c       *fakeClock
	when    time.Time
	ch      chan time.Time
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.activity.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.activity.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.activity.Add(1)
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// Advance moves time forward by d and fires the timers that came due, in
// order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].when.Before(c.timers[j].when) })
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped || t.fired:
		case !t.when.After(c.now):
			t.fired = true
			t.ch <- t.when
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

// settle waits until the code under test has not touched the clock for a
// few milliseconds of real time, so the next Advance finds it idle.
func (c *fakeClock) settle(t *testing.T) {
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

// fakeTicker fires every period of fake time, dropping ticks nobody read,
// as time.Ticker does.
type fakeTicker struct {
	c      *fakeClock
	mu     sync.Mutex
	period time.Duration
	timer  *fakeTimer
	ch     chan time.Time
	done   chan struct{}
}

func (c *fakeClock) NewTicker(d time.Duration) Ticker {
	tk := &fakeTicker{c: c, period: d, ch: make(chan time.Time, 1), done: make(chan struct{})}
	tk.arm()
	return tk
}

func (tk *fakeTicker) arm() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	t := tk.c.NewTimer(tk.period).(*fakeTimer)
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

func (tk *fakeTicker) C() <-chan time.Time { return tk.ch }

func (tk *fakeTicker) Stop() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.timer.Stop()
	select {
	case <-tk.done:
	default:
		close(tk.done)
	}
}

func (tk *fakeTicker) Reset(d time.Duration) {
	tk.Stop()
	tk.mu.Lock()
	tk.period, tk.done = d, make(chan struct{})
	tk.mu.Unlock()
	tk.arm()
}

// AfterFunc runs f once the fake time reaches d from now.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := c.NewTimer(d).(*fakeTimer)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.ch:
			f()
		case <-stop:
		}
	}()
	return &fakeAfter{t: t, stop: stop}
}

type fakeAfter struct {
	t    *fakeTimer
	stop chan struct{}
	once sync.Once
}

func (a *fakeAfter) C() <-chan time.Time { return nil }
func (a *fakeAfter) Stop() bool {
	was := a.t.Stop()
	a.once.Do(func() { close(a.stop) })
	return was
}
