package supervise

import "github.com/leaderrun/leaderrun/internal/clock/fakeclock"

// fakeClock is a Clock that moves only when the test says so.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }
