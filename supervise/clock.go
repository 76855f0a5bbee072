//go:build linux

package supervise

import "github.com/leaderrun/leaderrun/internal/clock"

// Clock is the one source of time on the leadership's timeline: deadlines,
// the stop timeline, renewals, restarts and the heartbeat. Real runs use
// Go's monotonic clock (DESIGN §1.2); tests inject a fake one
// (internal/clock/fakeclock) so the timeline can be checked without
// sleeping or racing real tickers.
type Clock = clock.Clock

// Timer is the part of *time.Timer the supervisor uses.
type Timer = clock.Timer

// Ticker is the part of *time.Ticker the supervisor uses.
type Ticker = clock.Ticker

// RealClock reads time.Now, whose monotonic reading makes every deadline
// immune to wall-clock steps.
type RealClock = clock.Real
