//go:build linux

package main

import (
	"time"

	"github.com/leaderrun/leaderrun/guard"
)

// settleTime is how long after start leaderrun trims its resident memory:
// by then package init, flag parsing and the first campaign are over.
const settleTime = 2 * time.Second

// trimResidentLater trims the process's resident memory once it has settled.
func trimResidentLater() { time.AfterFunc(settleTime, trimResident) }

// trimResident: see guard.TrimResident; docs/BENCHMARKS.md has the before
// and after.
func trimResident() { guard.TrimResident() }
