// Package clock is the injectable source of time of the supervisor and
// the lease-row core: real runs use Go's monotonic clock (DESIGN §1.2);
// tests inject package fakeclock's, which moves only when told, so that
// timelines, polls and retries are checked without sleeping.
package clock

import (
	"context"
	"time"
)

// Clock is a source of time and timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine after d, unless stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer in use.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; see time.Timer.Stop.
	Stop() bool
}

// Ticker is the part of *time.Ticker in use.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real reads time.Now, whose monotonic reading makes every deadline
// immune to wall-clock steps.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// AfterFunc wraps time.AfterFunc; its Timer's channel is never ready.
func (Real) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Sleep pauses for d on c and reports true, or reports false as soon as
// ctx ends; woken, when it closes first, cuts the pause short (true). A
// nil woken never does.
func Sleep(ctx context.Context, c Clock, d time.Duration, woken <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	case <-woken:
	}
	return true
}

// WithTimeout is context.WithTimeout on c: the real one on Real, else a
// context that ends, with the error context.DeadlineExceeded, once c has
// moved d on.
func WithTimeout(ctx context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := c.(Real); ok {
		return context.WithTimeout(ctx, d)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	t := c.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return timeoutCtx{cctx}, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// timeoutCtx reports the end of a WithTimeout on a clock that is not Real
// as context.DeadlineExceeded, as a real timeout's.
type timeoutCtx struct{ context.Context }

func (c timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
