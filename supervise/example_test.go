//go:build linux

package supervise_test

import (
	"fmt"
	"time"

	"github.com/leaderrun/leaderrun/supervise"
)

// The stop timeline of one lease: the deadline counts from the moment the
// last successful renewal was sent, with the smaller of the requested and
// the granted TTL; the job gets the stop signal a kill grace before its
// SIGKILL, which comes a safety margin before the deadline (DESIGN §1.2,
// §1.3).
func ExampleStopTimeline() {
	sent := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // renewal request sent
	// Asked for 15s; the backend granted 20s; only 15s count.
	deadline := supervise.NewDeadline(sent, 15*time.Second, 20*time.Second)
	tl := supervise.StopTimeline{Deadline: deadline, SafetyMargin: time.Second, KillGrace: 5 * time.Second}
	fmt.Println("stop signal at  +", tl.TermAt().Sub(sent))
	fmt.Println("SIGKILL at      +", tl.KillAt().Sub(sent))
	fmt.Println("lease deadline  +", tl.Deadline.Sub(sent))

	// The backend reports the lease lost at +12s: stop at once, and SIGKILL
	// after the kill grace but never after the lease's own kill point.
	lost := tl.StartedAt(sent.Add(12 * time.Second))
	fmt.Println("after a loss at +12s: stop signal at +", lost.TermAt().Sub(sent), "SIGKILL at +", lost.KillAt().Sub(sent))
	// Output:
	// stop signal at  + 9s
	// SIGKILL at      + 14s
	// lease deadline  + 15s
	// after a loss at +12s: stop signal at + 12s SIGKILL at + 14s
}
