//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Run records live in the state directory, one file per slot under
// <state>/<prefix>/<key>~run/ ('~' is never part of a key, so no key's
// files collide with them), on persistent storage like the epoch.

var _ locker.RunLog = (*Locker)(nil)

// RecordRun writes the slot's record once it proved that lease still holds
// the flock on the lock file at its path, durably (temporary file, fsync, rename), and
// removes expired records of the key.
func (l *Locker) RecordRun(ctx context.Context, lease locker.Lease, run locker.Run) error {
	if err := locker.ValidateSlot(run.Slot); err != nil {
		return fmt.Errorf("record run: slot %w", err)
	}
	ll, ok := lease.(*Lease)
	if !ok || ll.path != l.lockPath {
		return fmt.Errorf("record run: not a lease of %s", l.lockPath)
	}
	// Our open file holds the flock on the file at the path: we still lead
	// (a released lease's file is closed and fails this too).
	if err := ll.held(); err != nil {
		if errors.Is(err, errNotOurs) {
			return fmt.Errorf("record run of slot %s: %w: %v", run.Slot, locker.ErrLost, err)
		}
		return fmt.Errorf("record run of slot %s: %w", run.Slot, err)
	}
	if err := os.MkdirAll(l.runDir, 0o755); err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	if err := replaceFile(filepath.Join(l.runDir, run.Slot), run.Record()); err != nil {
		return fmt.Errorf("record run of slot %s: %w", run.Slot, err)
	}
	l.prune(time.Now())
	return nil
}

// prune removes expired records; a failure only leaves a file behind.
func (l *Locker) prune(now time.Time) {
	for _, r := range runsIn(l.runDir) {
		if !r.Live(now) {
			_ = os.Remove(filepath.Join(l.runDir, r.Slot))
		}
	}
}

// runs reads every record file of the key, and those an earlier version
// left in its per-user state directory (read only).
func (l *Locker) runs() []locker.Run {
	out := runsIn(l.runDir)
	if l.oldRunDir != "" {
		out = append(out, runsIn(l.oldRunDir)...)
	}
	return out
}

// runsIn reads the record files in dir.
func runsIn(dir string) []locker.Run {
	entries, _ := os.ReadDir(dir)
	var out []locker.Run
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".tmp" || locker.ValidateSlot(e.Name()) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if r, err := locker.ParseRun(b); err == nil && r.Slot == e.Name() {
			out = append(out, r)
		}
	}
	return out
}

// LookupRun reads the record of slot, in the state directory or else where
// an earlier version kept it; creates nothing.
func (l *Locker) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	if err := locker.ValidateSlot(slot); err != nil {
		return locker.Run{}, fmt.Errorf("look up run: slot %w", err)
	}
	r, err := lookupIn(l.runDir, slot)
	if errors.Is(err, locker.ErrNoRun) && l.oldRunDir != "" {
		if old, oerr := lookupIn(l.oldRunDir, slot); oerr == nil {
			return old, nil
		}
	}
	return r, err
}

func lookupIn(dir, slot string) (locker.Run, error) {
	b, err := os.ReadFile(filepath.Join(dir, slot))
	if errors.Is(err, os.ErrNotExist) {
		return locker.Run{}, fmt.Errorf("slot %s: %w", slot, locker.ErrNoRun)
	}
	if err != nil {
		return locker.Run{}, fmt.Errorf("look up run of slot %s: %w", slot, err)
	}
	r, err := locker.ParseRun(b)
	if err != nil {
		return locker.Run{}, fmt.Errorf("look up run of slot %s: %w", slot, err)
	}
	if !r.Live(time.Now()) {
		return locker.Run{}, fmt.Errorf("slot %s: record expired: %w", slot, locker.ErrNoRun)
	}
	return r, nil
}

// LatestRun returns the newest live record of the key.
func (l *Locker) LatestRun(ctx context.Context) (locker.Run, error) {
	return locker.LatestOf(l.runs(), time.Now())
}
