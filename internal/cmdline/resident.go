//go:build linux

package cmdline

import (
	"time"

	"github.com/leaderrun/leaderrun/guard"
)

// trimTimes are when, after start, leaderrun trims its resident memory: by
// the first, package init and flag parsing are over; by the second, the
// first campaign and the start of a job, whose code a long-running leader
// or standby does not run again.
var trimTimes = []time.Duration{2 * time.Second, 30 * time.Second}

// trimResidentLater trims the process's resident memory once it has settled.
func trimResidentLater() {
	for _, d := range trimTimes {
		time.AfterFunc(d, trimResident)
	}
}

// trimResident: see guard.TrimResident; docs/results/bench-2026-12-01-footprint.md
// has the before and after.
func trimResident() { guard.TrimResident() }
