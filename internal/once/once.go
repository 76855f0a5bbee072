//go:build linux

// Package once runs a command once per slot across hosts: a slot is a
// period aligned to the Unix epoch (--once-per) or a name (--run-id). The
// leader looks up the slot's record before starting the child and writes it,
// while still leader, after a successful run (at-least-once) or before the
// start (at-most-once). The records live in the backend, behind the
// locker.RunLog seam.
package once

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// When a slot is recorded.
const (
	// RecordSuccess records after a child exited 0 on its own: a failed
	// or interrupted run leaves the slot to the next candidate
	// (at-least-once).
	RecordSuccess = "success"
	// RecordStart records before the child starts: the slot is taken
	// even if the run then fails (at-most-once).
	RecordStart = "start"
)

// KeepPeriods is how many periods a record lives; RunIDKeep is its life
// when only --run-id names the slot.
const (
	KeepPeriods = 3
	RunIDKeep   = 7 * 24 * time.Hour
)

// SlotOf names the slot of period that contains now: the start of the
// period counted in whole periods from the Unix epoch, in UTC, RFC 3339
// ("2026-11-30T03:00:00Z"). Every host computes the same name from its own
// clock, so hosts agree unless their clocks straddle a boundary.
func SlotOf(period time.Duration, now time.Time) string {
	p := int64(period / time.Second)
	s := now.Unix()
	start := s - ((s%p)+p)%p
	return time.Unix(start, 0).UTC().Format(time.RFC3339)
}

// CatchUpSlot names the slot that a catch-up started at now stands for
// (--catch-up): the period just before now's, as long as now lies within
// grace of that period's end; until is the end of the grace. With grace at
// most one period (ValidateCatchUp), the window after one period's end
// lies inside the next period, so at any moment at most one slot, the
// latest that ended, can be caught up: older missed slots never are.
func CatchUpSlot(period, grace time.Duration, now time.Time) (slot string, until time.Time, ok bool) {
	cur, err := time.Parse(time.RFC3339, SlotOf(period, now))
	if err != nil {
		return "", time.Time{}, false // SlotOf writes RFC 3339
	}
	until = cur.Add(grace)
	if grace <= 0 || !now.Before(until) {
		return "", until, false
	}
	return cur.Add(-period).Format(time.RFC3339), until, true
}

// ValidateCatchUp checks a --catch-up grace against the --once-per period:
// more than zero, whole seconds, at most the period (a longer grace would
// reach past the next period's end, into slots that are not the latest).
func ValidateCatchUp(grace, period time.Duration) error {
	switch {
	case grace <= 0 || grace%time.Second != 0:
		return fmt.Errorf("must be a whole number of seconds, at least 1s, got %v", grace)
	case grace > period:
		return fmt.Errorf("must be at most the --once-per period %s, got %s: only the latest missed period is caught up", short(period), short(grace))
	}
	return nil
}

// short writes d as people write it: 1h, not 1h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ValidatePeriod checks a --once-per value: at least 1s, whole seconds.
func ValidatePeriod(period time.Duration) error {
	if period < time.Second || period%time.Second != 0 {
		return fmt.Errorf("must be a whole number of seconds, at least 1s, got %v", period)
	}
	return nil
}

// Gate decides, per leadership term, whether the slot's run happens, and
// records it.
type Gate struct {
	// Log is the backend's record store.
	Log locker.RunLog
	// Options name this candidate in the record.
	Options locker.Options
	// Slot is this invocation's slot, fixed when leaderrun started.
	Slot string
	// Keep is how long a record lives.
	Keep time.Duration
	// Record is RecordSuccess or RecordStart.
	Record string
	// SkipCode is the exit code when the slot already ran.
	SkipCode int
	// Logger receives the skip line (info) and failures (error).
	Logger hclog.Logger
	// CatchUp makes this the gate of a catch-up term (--catch-up): Slot
	// is the missed period, its record is marked as a catch-up, and the
	// child starts only before Until (the end of the grace), on Now's
	// clock (nil: time.Now).
	CatchUp bool
	Until   time.Time
	Now     func() time.Time
	// For a catch-up: the key's run history (nil: none to read), the
	// number of terms it keeps, and when the missed period ended. A
	// history that shows every term of the key starting after that end
	// says no candidate was there to run the period (firstUsedAfter).
	History     locker.History
	HistoryKeep int
	PeriodEnd   time.Time
}

// Hooks are the gate as supervisor term hooks.
func (g *Gate) Hooks() supervise.TermHooks {
	return supervise.TermHooks{BeforeStart: g.beforeStart, AfterRun: g.afterRun}
}

// beforeStart runs under the lease: what it reads no other candidate of
// the key can change before this term's record is written (the write
// itself is conditioned on the lease, locker.RunLog.RecordRun). For a
// catch-up, that is where the missed slot is found still unrun.
func (g *Gate) beforeStart(ctx context.Context, lease locker.Lease) (bool, string, int) {
	if g.CatchUp {
		now := time.Now()
		if g.Now != nil {
			now = g.Now()
		}
		if !now.Before(g.Until) {
			g.Logger.Info("no catch-up: its grace ended while waiting to lead", "slot", g.Slot, "grace_ended", g.Until.UTC().Format(time.RFC3339))
			return true, "catch-up grace over", g.SkipCode
		}
	}
	if g.CatchUp && g.firstUsedAfter(ctx, lease.Epoch()) {
		g.Logger.Info("no catch-up: the key was first used after that period ended", "slot", g.Slot)
		return true, "key first used after slot " + g.Slot, g.SkipCode
	}
	run, err := g.Log.LookupRun(ctx, g.Slot)
	switch {
	case err == nil && g.CatchUp:
		g.Logger.Info("no catch-up: " + run.Describe())
		return true, "slot " + g.Slot + " already ran", g.SkipCode
	case err == nil:
		g.Logger.Info("not starting the command: " + run.Describe())
		return true, "slot " + g.Slot + " already ran", g.SkipCode
	case !errors.Is(err, locker.ErrNoRun):
		g.Logger.Error("cannot read the slot's run record; not starting the command", "slot", g.Slot, "error", err)
		return true, "slot record unreadable", supervise.ExitInternal
	}
	if g.CatchUp {
		g.Logger.Info("catching up a missed slot", "slot", g.Slot)
	}
	if g.Record == RecordStart {
		r := g.newRun(locker.RunStarted, lease)
		if err := g.Log.RecordRun(ctx, lease, r); err != nil {
			// At-most-once: without a record, do not run.
			g.Logger.Error("cannot record the slot's start; not starting the command", "slot", g.Slot, "error", err)
			return true, "slot start not recorded", supervise.ExitInternal
		}
		g.Logger.Info("recorded the slot's start", "slot", g.Slot)
	}
	return false, "", 0
}

func (g *Gate) afterRun(ctx context.Context, lease locker.Lease, succeeded bool) {
	if !succeeded {
		if g.Record == RecordSuccess {
			g.Logger.Info("run did not succeed; the slot is left to the next candidate", "slot", g.Slot)
		}
		return
	}
	r := g.newRun(locker.RunSucceeded, lease)
	if err := g.Log.RecordRun(ctx, lease, r); err != nil {
		if g.Record == RecordSuccess {
			g.Logger.Error("cannot record the slot's run; another candidate may run it again", "slot", g.Slot, "error", err)
		}
		return
	}
	// Debug: history shows it; a successful cron run says only start and end.
	g.Logger.Debug("recorded the slot's run", "slot", g.Slot)
}

// firstUsedAfter reports whether the key's history shows that it was
// first used after the missed period ended: it holds terms other than
// this one (epoch), all started at or after PeriodEnd, and fewer than it
// keeps, so none older was pruned. Then nobody was there to run that
// period: the first hosts of a new key, started one after another, catch
// up nothing. Anything else (no history, an error, a pruned history, no
// other term) leaves the catch-up to the run record, as before; the
// answer can only skip a catch-up, never add a run.
func (g *Gate) firstUsedAfter(ctx context.Context, epoch uint64) bool {
	if g.History == nil || g.HistoryKeep <= 0 || g.PeriodEnd.IsZero() {
		return false
	}
	terms, err := g.History.Terms(ctx, 0)
	if err != nil || len(terms) >= g.HistoryKeep {
		return false
	}
	others := 0
	for _, t := range terms {
		if t.Epoch == epoch {
			continue
		}
		if t.Start.Before(g.PeriodEnd) {
			return false
		}
		others++
	}
	return others > 0
}

// newRun is the record of this gate's slot, marked when it is a catch-up.
func (g *Gate) newRun(outcome string, lease locker.Lease) locker.Run {
	r := locker.NewRun(g.Options, g.Slot, outcome, lease.Epoch(), g.Keep)
	r.CatchUp = g.CatchUp
	return r
}
