//go:build linux

package supervise

import "time"

// Clock is the supervisor's only source of time. Real runs use Go's
// monotonic clock (DESIGN §1.2); tests inject a fake one so the stop
// timeline can be checked without sleeping.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the supervisor uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; see time.Timer.Stop.
	Stop() bool
}

// RealClock reads time.Now, whose monotonic reading makes every deadline
// immune to wall-clock steps.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
