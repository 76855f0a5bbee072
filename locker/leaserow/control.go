package leaserow

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/locker"
)

// The control record (locker.Controls) is one more record of the key in
// the store, apart from the lease row: Store.ReadControl and
// Store.WriteControl. Its version is a counter the store keeps with it (1
// for the first write), shown as a decimal string; a write is conditioned
// on it as the lease row's are on theirs. These stores have no watch of
// their own. A store that can be told of a write (ControlNotifier:
// PostgreSQL's LISTEN/NOTIFY) has WaitControl read once per notification,
// plus a slow backstop read of its choosing; the others are read every
// Config.ControlPoll, with a cheaper read when the store has one
// (ControlProber: DynamoDB's eventually consistent GetItem).

// ControlNotifier is a Store that can be told when the key's control
// record may have been written: WriteControl sends a notice in the same
// write, and ListenControl receives them.
type ControlNotifier interface {
	// ListenControl starts listening for writes of the key's control
	// record. A write that succeeds after it returns is noticed by the
	// listen's Wait. An error wrapping locker.ErrRefused means the store
	// cannot listen (it said so in the log, once): WaitControl reads
	// every Config.ControlPoll instead.
	ListenControl(ctx context.Context) (ControlListen, error)
}

// ControlListen is one listen of ListenControl, used by one goroutine.
type ControlListen interface {
	// Wait returns nil once the record may have changed since the listen
	// began or the last Wait returned: a notice of a write, or the
	// store's backstop interval (a notice can be lost) passed without
	// one. It returns ctx.Err() when ctx ends first, and any other error
	// when the listen broke: Close it and listen again.
	Wait(ctx context.Context) error
	// Close ends the listen.
	Close()
}

// ControlProber is a Store with a read of the control record's version
// that is cheaper than ReadControl and may be stale (an eventually
// consistent read): WaitControl polls with it and confirms a change with
// ReadControl. It returns 0 when it finds no record.
type ControlProber interface {
	ProbeControl(ctx context.Context) (version uint64, err error)
}

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

// WaitControl returns the record once its version is not version. On a
// ControlNotifier it listens first, then reads, then reads again at each
// Wait's return, so a write made before the listen began is read and one
// made after it is noticed; a listen that breaks is begun again, and one
// that cannot begin leaves this wait to the poll below. A read that fails
// in a way worth retrying is retried every Config.ControlPoll (logged
// once); a refusal ends the wait.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	n, ok := l.store.(ControlNotifier)
	if !ok {
		return l.pollControl(ctx, version, false)
	}
	for {
		lis, err := n.ListenControl(ctx)
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case errors.Is(err, locker.ErrRefused):
			return l.pollControl(ctx, version, false)
		case err != nil:
			// Read once as the poll does, and try to listen again.
			l.log.Debug("cannot listen for control writes; reading instead", "error", err)
			c, done, err := l.controlStep(ctx, version, true)
			if done {
				return c, err
			}
			continue
		}
		c, done, err := l.waitListening(ctx, lis, version)
		lis.Close()
		if done {
			return c, err
		}
	}
}

// waitListening reads the record, and again at each return of lis.Wait,
// until its version is not version (done). It gives up (not done) when
// the listen breaks.
func (l *Locker) waitListening(ctx context.Context, lis ControlListen, version string) (locker.Control, bool, error) {
	failing := false
	for {
		c, err := l.Control(ctx)
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, true, ctx.Err()
		case err == nil:
			if c.Version != version {
				return c, true, nil
			}
			failing = false
		case errors.Is(err, locker.ErrRefused):
			return locker.Control{}, true, err
		default:
			l.readFailed(err, &failing)
			if !clock.Sleep(ctx, l.clock, l.ctlPoll, nil) {
				return locker.Control{}, true, ctx.Err()
			}
			continue
		}
		if err := lis.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return locker.Control{}, true, ctx.Err()
			}
			l.log.Debug("the listen for control writes broke; listening again", "error", err)
			return locker.Control{}, false, nil
		}
	}
}

// pollControl reads the record every Config.ControlPoll until its version
// is not version.
func (l *Locker) pollControl(ctx context.Context, version string, failing bool) (locker.Control, error) {
	for {
		c, done, err := l.controlStep(ctx, version, failing)
		if done {
			return c, err
		}
		failing = err != nil
	}
}

// controlStep is one step of the poll: a read (through the store's
// ControlProber first when it has one), and when the version is still
// version, or the read failed in a way worth retrying, a sleep of
// Config.ControlPoll (not done, with the read's error). quiet keeps a
// failure at Debug (one was logged already).
func (l *Locker) controlStep(ctx context.Context, version string, quiet bool) (locker.Control, bool, error) {
	c, same, err := l.probeControl(ctx, version)
	switch {
	case ctx.Err() != nil:
		return locker.Control{}, true, ctx.Err()
	case err == nil:
		if !same {
			return c, true, nil
		}
	case errors.Is(err, locker.ErrRefused):
		return locker.Control{}, true, err
	default:
		l.readFailed(err, &quiet)
	}
	if !clock.Sleep(ctx, l.clock, l.ctlPoll, nil) {
		return locker.Control{}, true, ctx.Err()
	}
	return locker.Control{}, false, err
}

// probeControl reads the record unless the store's ControlProber says its
// version is still version (same).
func (l *Locker) probeControl(ctx context.Context, version string) (c locker.Control, same bool, err error) {
	if p, ok := l.store.(ControlProber); ok {
		if want, ok := ParseControlVersion(version); ok {
			cctx, cancel := context.WithTimeout(ctx, l.timeout)
			got, err := p.ProbeControl(cctx)
			cancel()
			switch {
			case errors.Is(err, ErrNoRow):
				got, err = 0, nil
			case err != nil && ctx.Err() != nil:
				return locker.Control{}, false, ctx.Err()
			}
			if err != nil || got == want {
				return locker.Control{}, err == nil, err
			}
		}
	}
	c, err = l.Control(ctx)
	return c, err == nil && c.Version == version, err
}

// readFailed logs a failed read of the record: at Warn the first time
// (*failing false), at Debug while it keeps failing.
func (l *Locker) readFailed(err error, failing *bool) {
	if !*failing {
		l.log.Warn("reading the control record failed; retrying", "error", err)
		*failing = true
		return
	}
	l.log.Debug("reading the control record failed; retrying", "error", err)
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
