//go:build linux

package once

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
)

// memLog is a RunLog in memory, for the gate's decisions alone: the
// backends' own RunLogs pass lockertest.RunLogContract.
type memLog struct {
	runs    map[string]locker.Run
	lookups int
	lost    bool // RecordRun fails as it does once the lease is gone
}

func (m *memLog) RecordRun(_ context.Context, _ locker.Lease, r locker.Run) error {
	if m.lost {
		return fmt.Errorf("record: %w", locker.ErrLost)
	}
	m.runs[r.Slot] = r
	return nil
}

func (m *memLog) LookupRun(_ context.Context, slot string) (locker.Run, error) {
	m.lookups++
	if r, ok := m.runs[slot]; ok {
		return r, nil
	}
	return locker.Run{}, locker.ErrNoRun
}

func (m *memLog) LatestRun(context.Context) (locker.Run, error) { return locker.Run{}, locker.ErrNoRun }

type epochLease struct{ locker.Lease }

func (epochLease) Epoch() uint64 { return 7 }

// catchUpGate is the gate of a catch-up of the slot before now's, as the
// command line builds it, on a clock that reads *now.
func catchUpGate(t *testing.T, log *memLog, record string, now *time.Time) *Gate {
	t.Helper()
	slot, until, ok := CatchUpSlot(24*time.Hour, 6*time.Hour, *now)
	if !ok {
		t.Fatalf("no catch-up at %v", *now)
	}
	return &Gate{Log: log, Slot: slot, Keep: time.Hour, Record: record, SkipCode: 0, Logger: hclog.NewNullLogger(),
		CatchUp: true, Until: until, Now: func() time.Time { return *now }}
}

func TestCatchUpGate(t *testing.T) {
	ctx := context.Background()
	missed := "2026-12-06T00:00:00Z"
	t.Run("a missed slot runs once, recorded as a catch-up of that slot", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{}}
		now := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
		g := catchUpGate(t, log, RecordSuccess, &now)
		if skip, why, _ := g.beforeStart(ctx, epochLease{}); skip {
			t.Fatalf("missed slot skipped: %s", why)
		}
		g.afterRun(ctx, epochLease{}, true)
		r, ok := log.runs[missed]
		if !ok || !r.CatchUp || r.Outcome != locker.RunSucceeded || r.Epoch != 7 || len(log.runs) != 1 {
			t.Fatalf("records %+v, want one catch-up of %s", log.runs, missed)
		}
		// The next candidate within the grace finds it done.
		if skip, _, _ := catchUpGate(t, log, RecordSuccess, &now).beforeStart(ctx, epochLease{}); !skip {
			t.Fatal("a second catch-up of the same slot was let through")
		}
	})
	t.Run("a slot that ran is not caught up", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{missed: {Slot: missed, Outcome: locker.RunSucceeded}}}
		now := time.Date(2026, 12, 7, 0, 30, 0, 0, time.UTC)
		if skip, _, _ := catchUpGate(t, log, RecordSuccess, &now).beforeStart(ctx, epochLease{}); !skip {
			t.Fatal("a slot that ran was caught up")
		}
	})
	t.Run("a slot started at most once is not caught up", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{missed: {Slot: missed, Outcome: locker.RunStarted}}}
		now := time.Date(2026, 12, 7, 0, 30, 0, 0, time.UTC)
		if skip, _, _ := catchUpGate(t, log, RecordStart, &now).beforeStart(ctx, epochLease{}); !skip {
			t.Fatal("a slot recorded at its start was caught up")
		}
	})
	t.Run("the grace ends while waiting to lead", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{}}
		now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
		g := catchUpGate(t, log, RecordSuccess, &now)
		now = now.Add(time.Hour) // won the lease at 06:00, the grace's end
		if skip, _, _ := g.beforeStart(ctx, epochLease{}); !skip || log.lookups != 0 {
			t.Fatalf("caught up after the grace (skip %v, %d lookups)", skip, log.lookups)
		}
	})
	t.Run("a failed catch-up leaves the slot to the next candidate", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{}}
		now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
		g := catchUpGate(t, log, RecordSuccess, &now)
		if skip, _, _ := g.beforeStart(ctx, epochLease{}); skip {
			t.Fatal("missed slot skipped")
		}
		g.afterRun(ctx, epochLease{}, false)
		if len(log.runs) != 0 {
			t.Fatalf("a failed catch-up was recorded: %+v", log.runs)
		}
	})
	t.Run("at most once: no record under the lease, no run", func(t *testing.T) {
		log := &memLog{runs: map[string]locker.Run{}, lost: true}
		now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
		skip, _, code := catchUpGate(t, log, RecordStart, &now).beforeStart(ctx, epochLease{})
		if !skip || code == 0 {
			t.Fatalf("catch-up started without its record (skip %v, code %d)", skip, code)
		}
		log.lost = false
		now = now.Add(time.Minute)
		g := catchUpGate(t, log, RecordStart, &now)
		if skip, _, _ := g.beforeStart(ctx, epochLease{}); skip || !log.runs[missed].CatchUp || log.runs[missed].Outcome != locker.RunStarted {
			t.Fatalf("at-most-once catch-up: skip %v, records %+v", skip, log.runs)
		}
	})
}

// memHistory is a run history in memory, for the gate's reading of it.
type memHistory struct {
	terms []locker.Term
	err   error
}

func (m *memHistory) RecordTerm(context.Context, locker.Term, int) error { return nil }

func (m *memHistory) Terms(context.Context, int) ([]locker.Term, error) { return m.terms, m.err }

// TestCatchUpFirstUsedAfter: a history whose other terms all started
// after the missed period ended skips the catch-up; an older term, a full
// history, no other term, an error or no history leave it to the record.
func TestCatchUpFirstUsedAfter(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 3, 7, 0, 0, time.UTC)
	end := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	after, before := locker.Term{Epoch: 3, Start: end.Add(time.Hour)}, locker.Term{Epoch: 2, Start: end.Add(-time.Hour)}
	ours := locker.Term{Epoch: 7, Start: now} // epochLease's
	cases := []struct {
		name string
		h    *memHistory
		keep int
		skip bool
	}{
		{"only terms after the period", &memHistory{terms: []locker.Term{ours, after}}, 30, true},
		{"a term before", &memHistory{terms: []locker.Term{ours, after, before}}, 30, false},
		{"a full history", &memHistory{terms: []locker.Term{ours, after}}, 2, false},
		{"no other term", &memHistory{terms: []locker.Term{ours}}, 30, false},
		{"unreadable", &memHistory{err: fmt.Errorf("down")}, 30, false},
		{"no history", nil, 30, false},
		{"history off", &memHistory{terms: []locker.Term{after}}, 0, false},
	}
	for _, c := range cases {
		log := &memLog{runs: map[string]locker.Run{}}
		g := catchUpGate(t, log, RecordSuccess, &now)
		g.PeriodEnd, g.HistoryKeep = end, c.keep
		if c.h != nil {
			g.History = c.h
		}
		skip, _, _ := g.beforeStart(ctx, epochLease{})
		if skip != c.skip {
			t.Errorf("%s: skip %v, want %v", c.name, skip, c.skip)
		}
	}
}
