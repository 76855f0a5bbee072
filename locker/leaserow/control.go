package leaserow

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// The control record (locker.Controls) is one more record of the key in
// the store, apart from the lease row: Store.ReadControl and
// Store.WriteControl. Its version is a counter the store keeps with it (1
// for the first write), shown as a decimal string; a write is conditioned
// on it as the lease row's are on theirs. These stores have no watch:
// WaitControl reads again every locker.ControlPoll.

// Control reads the key's control record; a key without one gives the
// zero Control.
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	value, version, err := l.store.ReadControl(cctx)
	switch {
	case errors.Is(err, ErrNoRow):
		return locker.Control{}, nil
	case err != nil:
		if ctx.Err() != nil {
			return locker.Control{}, ctx.Err()
		}
		return locker.Control{}, err
	}
	c, err := locker.ParseControl(value, strconv.FormatUint(version, 10))
	if err != nil {
		return locker.Control{}, fmt.Errorf("%s: %w: control record of key %q: %w", l.name, locker.ErrRefused, l.controlKey(), err)
	}
	return c, nil
}

// SetControl writes c as the key's control record if its version is still
// c.Version. A write whose answer was lost may have happened: the caller's
// next write at the same version then conflicts, and it reads again.
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	prev, ok := ParseControlVersion(c.Version)
	if !ok {
		// No record of this store ever had that version.
		return "", fmt.Errorf("%s: control record of key %q: version %q: %w", l.name, l.controlKey(), c.Version, locker.ErrConflict)
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := l.store.WriteControl(cctx, prev, c.Record())
	switch {
	case errors.Is(err, ErrConflict):
		return "", fmt.Errorf("%s: control record of key %q: %w", l.name, l.controlKey(), locker.ErrConflict)
	case err != nil:
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", err
	}
	return strconv.FormatUint(prev+1, 10), nil
}

// WaitControl reads the record every locker.ControlPoll until its version
// is not version. A read that fails in a way worth retrying is retried at
// the same pace (logged once); a refusal ends the wait.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	failing := false
	for {
		c, err := l.Control(ctx)
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case err == nil:
			if c.Version != version {
				return c, nil
			}
			failing = false
		case errors.Is(err, locker.ErrRefused):
			return locker.Control{}, err
		case !failing:
			l.log.Warn("reading the control record failed; retrying", "error", err)
			failing = true
		default:
			l.log.Debug("reading the control record failed; retrying", "error", err)
		}
		if !retry.Sleep(ctx, locker.ControlPoll) {
			return locker.Control{}, ctx.Err()
		}
	}
}

// controlKey names the key whose record it is, for errors.
func (l *Locker) controlKey() string { return locker.ControlKey(l.opts.Key) }

// ParseControlVersion reads a control record's version as these stores
// show it: "" is 0 (no record yet), else a positive decimal counter. ok is
// false for anything else, a version no record can have.
func ParseControlVersion(v string) (n uint64, ok bool) {
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != v || n >= 1<<63-1 {
		return 0, false
	}
	return n, true
}
