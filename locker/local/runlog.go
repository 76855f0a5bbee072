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
	d, err := l.openRoot(l.stateDir, l.runRel, "StateDir", true)
	if err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	defer d.close()
	if err := d.replace(run.Slot, run.Record()); err != nil {
		return fmt.Errorf("record run of slot %s: %w", run.Slot, err)
	}
	prune(d, time.Now())
	return nil
}

// prune removes expired records; a failure only leaves a file behind.
func prune(d *dir, now time.Time) {
	for _, r := range runsIn(d) {
		if !r.Live(now) {
			_ = d.remove(r.Slot)
		}
	}
}

// runs reads every record file of the key, and those an earlier version
// left in its per-user state directory (read only).
func (l *Locker) runs() []locker.Run {
	var out []locker.Run
	if d, err := l.openRoot(l.stateDir, l.runRel, "StateDir", false); err == nil {
		out = runsIn(d)
		d.close()
	}
	if l.oldRunDir != "" {
		if d, err := openTree(l.oldRunRoot, l.oldRunRel, "StateDir", false); err == nil {
			out = append(out, runsIn(d)...)
			d.close()
		}
	}
	return out
}

// runsIn reads the record files in d.
func runsIn(d *dir) []locker.Run {
	var out []locker.Run
	for _, name := range d.names() {
		if filepath.Ext(name) == ".tmp" || locker.ValidateSlot(name) != nil {
			continue
		}
		b, err := d.readFile(name)
		if err != nil {
			continue
		}
		if r, err := locker.ParseRun(b); err == nil && r.Slot == name {
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
	r, err := lookupIn(l.stateDir, l.runRel, slot)
	if errors.Is(err, locker.ErrNoRun) && l.oldRunDir != "" {
		if old, oerr := lookupIn(l.oldRunRoot, l.oldRunRel, slot); oerr == nil {
			return old, nil
		}
	}
	return r, err
}

func lookupIn(root, rel, slot string) (locker.Run, error) {
	d, err := openTree(root, rel, "StateDir", false)
	if errors.Is(err, os.ErrNotExist) {
		return locker.Run{}, fmt.Errorf("slot %s: %w", slot, locker.ErrNoRun)
	}
	if err != nil {
		return locker.Run{}, fmt.Errorf("look up run of slot %s: %w", slot, err)
	}
	defer d.close()
	b, err := d.readFile(slot)
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
