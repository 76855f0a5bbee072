package leaserow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are the Store's: the control
// record (ReadControl, WriteControl), with a version that is a counter
// the store keeps with it (1 for the first write), shown as a decimal
// string; the history records (PutTerm, ListTerms), written and cut to
// the newest keep in one call; and the run records (PutRun, ListRuns),
// written on the condition that the lease row is held by the lease's
// term and pruned of expired records by the store itself. rowRecords
// makes of them the records.Store of the Locker's records.Core.
//
// These stores have no watch of their own: rowRecords is the Core's
// Waiter. On a ControlNotifier (PostgreSQL's LISTEN/NOTIFY) it listens
// first, then reads, then reads again at each return of the listen's
// Wait, so a write made before the listen began is read and one made
// after it is noticed; a listen that cannot begin for good leaves the
// wait to the poll. The poll reads every Config.ControlPoll, through the
// store's ControlProber first when it has one (DynamoDB's eventually
// consistent GetItem), and fully only once the probe saw a change.

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

// rowRecords is a Locker's records.Store.
type rowRecords struct {
	l *Locker
	Store
}

var (
	_ records.Waiter      = rowRecords{}
	_ records.Expiring    = rowRecords{}
	_ records.TermBatcher = rowRecords{}
)

// sleeper is the Locker's clock as the records core keeps time.
type sleeper struct{ clock.Clock }

func (c sleeper) Sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, c.Clock, d, nil)
}

func (r rowRecords) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	if kind == records.Control {
		value, version, err := r.ReadControl(ctx)
		if errors.Is(err, ErrNoRow) {
			return nil, "", false, nil
		}
		return value, strconv.FormatUint(version, 10), err == nil, err
	}
	entries, err := r.List(ctx, kind, true)
	for _, e := range entries {
		if e.Name == name {
			return e.Value, "", true, nil
		}
	}
	return nil, "", false, err
}

// Swap writes the control record at the version after prev. A write
// whose answer was lost may have happened: the caller's next write at the
// same version then conflicts, and it reads again.
func (r rowRecords) Swap(ctx context.Context, _ records.Kind, _, prev string, value []byte) (string, error) {
	what := fmt.Sprintf("%s: control record of key %q", r.l.name, r.l.opts.Key)
	n, ok := ParseControlVersion(prev)
	if !ok { // no record of this store ever had that version
		return "", fmt.Errorf("%s: version %q: %w", what, prev, locker.ErrConflict)
	}
	err := r.WriteControl(ctx, n, value)
	if errors.Is(err, ErrConflict) {
		return "", fmt.Errorf("%s: %w", what, locker.ErrConflict)
	}
	return strconv.FormatUint(n+1, 10), err
}

func (r rowRecords) List(ctx context.Context, kind records.Kind, _ bool) ([]records.Entry, error) {
	if kind == records.Term {
		return r.ListTerms(ctx)
	}
	return r.ListRuns(ctx)
}

// PutHeld writes a run record if lease still holds the row, checked in
// the same write; ErrLost otherwise.
func (r rowRecords) PutHeld(ctx context.Context, held locker.Lease, _ records.Kind, slot string, value []byte, _ time.Time) error {
	ls, ok := held.(*lease)
	if !ok || ls.l != r.l {
		return fmt.Errorf("%s: record run: not a lease of this locker", r.l.name)
	}
	select {
	case <-ls.Lost():
		return fmt.Errorf("%s: record run of slot %s: %w: %s", r.l.name, slot, locker.ErrLost, ls.LostReason())
	default:
	}
	run, err := locker.ParseRun(value)
	if err == nil {
		err = r.PutRun(ctx, ls.term, run)
	}
	if errors.Is(err, ErrConflict) {
		return fmt.Errorf("%s: record run of slot %s: %w: the lease row is no longer ours", r.l.name, slot, locker.ErrLost)
	}
	return err
}

// PutTerm writes a history record and cuts the history to keep.
func (r rowRecords) PutTerm(ctx context.Context, _ string, value []byte, keep int) error {
	term, err := locker.ParseTerm(value)
	if err != nil {
		return err
	}
	return r.Store.PutTerm(ctx, term, keep)
}

// RunsExpire: PutRun drops the expired run records itself.
func (rowRecords) RunsExpire() bool { return true }

// Put and Delete are not used: the history is written by PutTerm, run
// records are pruned by PutRun.
func (rowRecords) Put(context.Context, records.Kind, string, []byte) error { return errUnused }
func (rowRecords) Delete(context.Context, records.Kind, string) error      { return errUnused }

var errUnused = errors.New("leaserow: not a call of the records core")

// WaitControl returns the record once its version may not be version:
// see the comment at the top of this file.
func (r rowRecords) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	if n, ok := r.Store.(ControlNotifier); ok {
		lis, err := n.ListenControl(ctx)
		switch {
		case err == nil:
			defer lis.Close()
			for {
				value, v, ok, err := r.read(ctx)
				if err != nil || v != version {
					return value, v, ok, err
				}
				if err := lis.Wait(ctx); err != nil {
					return nil, "", false, fmt.Errorf("the listen for control writes broke: %w", err)
				}
			}
		case !errors.Is(err, locker.ErrRefused) || ctx.Err() != nil:
			// Read once, and let the core listen again.
			r.l.log.Debug("cannot listen for control writes; reading instead", "error", err)
			return r.read(ctx)
		}
	}
	p, probes := r.Store.(ControlProber)
	want, ok := ParseControlVersion(version)
	for {
		if !probes || !ok || r.changed(ctx, p, want) {
			value, v, ok, err := r.read(ctx)
			if err != nil || v != version {
				return value, v, ok, err
			}
		}
		if !clock.Sleep(ctx, r.l.clock, r.l.ctlPoll, nil) {
			return nil, "", false, ctx.Err()
		}
	}
}

// read reads the control record within the Locker's timeout.
func (r rowRecords) read(ctx context.Context) ([]byte, string, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, r.l.timeout)
	defer cancel()
	return r.Get(cctx, records.Control, "")
}

// changed reports whether the probe shows a version other than want, or
// failed (the full read then tells).
func (r rowRecords) changed(ctx context.Context, p ControlProber, want uint64) bool {
	cctx, cancel := context.WithTimeout(ctx, r.l.timeout)
	defer cancel()
	got, err := p.ProbeControl(cctx)
	if errors.Is(err, ErrNoRow) {
		got, err = 0, nil
	}
	return err != nil || got != want
}

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
