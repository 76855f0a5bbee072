// Package records is the one implementation of the records a key keeps on
// its backend beside its lease: the control record (locker.Controls), the
// run history (locker.History) and the once-per run records
// (locker.RunLog). A backend supplies a Store, a handful of native calls
// on its own server (a linearizable read with a version, a
// compare-and-swap, a write that stands only while a lease stands, a list
// and a delete, and optionally a native wait); Core builds the three
// capabilities on it, with one retry policy for WaitControl.
//
// Where and how the records lie on the server (paths, encodings,
// versions) is the Store's alone, so that a backend ported to this
// package keeps the layout that older releases read and write.
package records

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// Kind is one of the three kinds of record.
type Kind int

const (
	// Control is the key's control record, shared by its slot keys
	// (locker.Options.Key); its name is always "".
	Control Kind = iota
	// Term is a history record, named locker.TermName(epoch).
	Term
	// Run is a once-per record, named by its slot.
	Run
)

func (k Kind) String() string {
	switch k {
	case Control:
		return "control"
	case Term:
		return "term"
	case Run:
		return "run"
	}
	return "kind " + strconv.Itoa(int(k))
}

// Entry is one record a Store lists. Value is nil when the Store was not
// asked for values and did not read them anyway.
type Entry struct {
	Name  string
	Value []byte
	// Kept marks a record the Core reads but never deletes: one an older
	// release left where this one no longer writes (the local backend's
	// per-user run records).
	Kept bool
}

// Store is one key's records on one backend. Each call is bounded by ctx
// (the Core puts its per-call timeout on it). An error wrapping
// locker.ErrRefused means retrying cannot help; any other error is worth
// retrying, and a write that failed so may still have happened. Errors
// already name the backend and what failed.
type Store interface {
	// Get reads the record with a linearizable read: its value and the
	// Store's version of it, an opaque non-empty string; ok is false when
	// there is none.
	Get(ctx context.Context, kind Kind, name string) (value []byte, version string, ok bool, err error)

	// Swap writes value if the record's version is still prev (prev
	// empty: if there is none) and returns the new version, which differs
	// from every earlier one even when value does not change. A version
	// that is not the current one, or that no record of the Store can
	// have, gives an error wrapping locker.ErrConflict. The Core uses it
	// for the control record only.
	Swap(ctx context.Context, kind Kind, name, prev string, value []byte) (version string, err error)

	// Put writes value unconditionally, creating the record or replacing
	// it, with no lease: it outlives every term. The Core uses it for
	// history records.
	Put(ctx context.Context, kind Kind, name string, value []byte) error

	// PutHeld writes value in one write that happens only while lease,
	// one the backend's Acquire returned, still leads the key; otherwise
	// nothing is written and the error wraps locker.ErrLost. expires is
	// when the record stops counting: a Store whose server expires
	// records (Expiring) has it delete the record some time after. The
	// Core uses it for run records.
	PutHeld(ctx context.Context, lease locker.Lease, kind Kind, name string, value []byte, expires time.Time) error

	// List returns the records of kind (never Control), in any order,
	// with a linearizable read, with their values. With values false the
	// Store may leave Value nil; the Core then reads the ones it needs
	// with Get.
	List(ctx context.Context, kind Kind, values bool) ([]Entry, error)

	// Delete removes the record; one already gone is no error.
	Delete(ctx context.Context, kind Kind, name string) error
}

// Waiter is a Store with a native wait on the control record (a watch, a
// blocking query, a file's change).
type Waiter interface {
	// WaitControl returns the control record as it read it (as Get) once
	// its version may no longer be version: on a change it saw, or
	// earlier, for any reason of its own (a watch that ended, a blocking
	// query's time limit). It must not miss a change made after it was
	// called. An error ends this wait; the Core waits again after a pause.
	WaitControl(ctx context.Context, version string) (value []byte, newVersion string, ok bool, err error)
}

// Expiring is a Store whose server deletes a run record by itself after
// the expires given to PutHeld (etcd: a lease of its own), or whose
// PutHeld drops the expired ones (the lease-row stores): the Core then
// prunes no expired records.
type Expiring interface {
	RunsExpire() bool
}

// TermBatcher is a Store that writes a term record and cuts the key's
// records to the newest keep (keep > 0) in one call (the Kubernetes
// history Lease: one write; PostgreSQL: one round trip): PutTerm writes
// the record of name, and the Core then lists and deletes nothing.
type TermBatcher interface {
	PutTerm(ctx context.Context, name string, value []byte, keep int) error
}

// Clock is the time the Core keeps: the real one, or a test's.
type Clock = retry.Clock

// The one retry policy of WaitControl. A Store without a native wait is
// read every locker.ControlPoll. A read or a native wait that failed is
// tried again after WaitRetryMin, doubling up to locker.ControlPoll, so a
// backend out of reach is asked no more often than that and a change
// still reaches the waiter within locker.ControlPoll of the backend's
// return. A native wait that returned the same version at once is paced
// the same way, so that it cannot become a busy loop; one that lasted
// longer than locker.ControlPoll is begun again at once.
const WaitRetryMin = 100 * time.Millisecond

// Config builds a Core.
type Config struct {
	// Store holds the records.
	Store Store
	// Name prefixes the Core's own errors ("etcd").
	Name string
	// Key is the key whose control record the Core reads (the key
	// itself, never a slot key: locker.Options.Key), for errors.
	Key string
	// Timeout bounds each call to the Store; 0 leaves ctx alone.
	Timeout time.Duration
	// Final reports an error that ends WaitControl at once besides a
	// refusal (a closed Locker); nil: none.
	Final func(error) bool
	// Log takes WaitControl's retries; nil: none.
	Log hclog.Logger
	// Clock keeps time; nil: the real clock.
	Clock Clock
}

// Core implements locker.Controls, locker.History and locker.RunLog on a
// Store. A backend's Locker embeds it.
type Core struct {
	c Config
}

var (
	_ locker.Controls = (*Core)(nil)
	_ locker.History  = (*Core)(nil)
	_ locker.RunLog   = (*Core)(nil)
)

// New builds a Core.
func New(c Config) *Core {
	if c.Clock == nil {
		c.Clock = retry.RealClock{}
	}
	if c.Log == nil {
		c.Log = hclog.NewNullLogger()
	}
	if c.Final == nil {
		c.Final = func(error) bool { return false }
	}
	return &Core{c: c}
}

// call bounds one Store call by the configured timeout.
func (r *Core) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.c.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.c.Timeout)
}

// ctxErr returns ctx's error in place of err once ctx ended.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ---- Controls ----

// Control reads the key's control record; a key without one gives the
// zero Control.
func (r *Core) Control(ctx context.Context) (locker.Control, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	value, version, ok, err := r.c.Store.Get(cctx, Control, "")
	if err != nil {
		return locker.Control{}, ctxErr(ctx, err)
	}
	return r.parseControl(value, version, ok)
}

func (r *Core) parseControl(value []byte, version string, ok bool) (locker.Control, error) {
	if !ok {
		return locker.Control{}, nil
	}
	c, err := locker.ParseControl(value, version)
	if err != nil {
		return locker.Control{}, fmt.Errorf("%s: control record of key %q: %w", r.c.Name, r.c.Key, err)
	}
	return c, nil
}

// SetControl writes c if the record's version is still c.Version.
func (r *Core) SetControl(ctx context.Context, c locker.Control) (string, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	v, err := r.c.Store.Swap(cctx, Control, "", c.Version, c.Record())
	if err != nil {
		return "", ctxErr(ctx, err)
	}
	return v, nil
}

// WaitControl returns the record once its version is not version, with
// the Store's native wait when it has one and by reading every
// locker.ControlPoll otherwise; see WaitRetryMin for the pace of retries.
// Only a refusal, a Final error or the end of ctx ends it with an error.
func (r *Core) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	w, native := r.c.Store.(Waiter)
	backoff := retry.Backoff{Min: WaitRetryMin, Max: locker.ControlPoll}
	for {
		start := r.c.Clock.Now()
		var (
			value []byte
			v     string
			ok    bool
			err   error
		)
		if native {
			value, v, ok, err = w.WaitControl(ctx, version)
		} else {
			cctx, cancel := r.call(ctx)
			value, v, ok, err = r.c.Store.Get(cctx, Control, "")
			cancel()
		}
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case err != nil && (errors.Is(err, locker.ErrRefused) || r.c.Final(err)):
			return locker.Control{}, err
		case err != nil:
			r.c.Log.Debug("reading the control record failed; retrying", "key", r.c.Key, "error", err)
			if !r.c.Clock.Sleep(ctx, backoff.Next()) {
				return locker.Control{}, ctx.Err()
			}
			continue
		}
		if v != version {
			return r.parseControl(value, v, ok)
		}
		pause := locker.ControlPoll
		if native {
			if r.c.Clock.Now().Sub(start) > locker.ControlPoll {
				backoff.Reset()
				continue
			}
			pause = backoff.Next()
		}
		if !r.c.Clock.Sleep(ctx, pause) {
			return locker.Control{}, ctx.Err()
		}
	}
}

// ---- History ----

// RecordTerm writes the record of term.Epoch, with no lease, and deletes
// the records beyond the newest keep.
func (r *Core) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("%s: record term: no epoch", r.c.Name)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	if b, ok := r.c.Store.(TermBatcher); ok {
		if keep <= 0 {
			keep = locker.DefaultHistoryKeep
		}
		return ctxErr(ctx, b.PutTerm(cctx, locker.TermName(term.Epoch), term.Record(), keep))
	}
	if err := r.c.Store.Put(cctx, Term, locker.TermName(term.Epoch), term.Record()); err != nil {
		return ctxErr(ctx, err)
	}
	entries, err := r.c.Store.List(cctx, Term, false)
	if err != nil {
		return ctxErr(ctx, err)
	}
	var terms []locker.Term
	for _, e := range entries {
		if epoch, ok := termEpoch(e.Name); ok {
			terms = append(terms, locker.Term{Epoch: epoch})
		}
	}
	for _, epoch := range locker.Pruned(terms, keep) {
		if err := r.c.Store.Delete(cctx, Term, locker.TermName(epoch)); err != nil {
			return ctxErr(ctx, err)
		}
	}
	return nil
}

// termEpoch reads a record's name as the epoch it is the TermName of.
func termEpoch(name string) (uint64, bool) {
	e, err := strconv.ParseUint(name, 10, 64)
	return e, err == nil && e > 0 && name == locker.TermName(e)
}

// Terms returns up to limit terms (limit <= 0: all kept), newest first.
// Records that do not parse, or lie under another epoch's name, are left
// out.
func (r *Core) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	entries, err := r.c.Store.List(cctx, Term, limit <= 0)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	var all []locker.Term
	byEpoch := map[uint64][]byte{}
	for _, e := range entries {
		if epoch, ok := termEpoch(e.Name); ok {
			all = append(all, locker.Term{Epoch: epoch})
			byEpoch[epoch] = e.Value
		}
	}
	terms := []locker.Term{}
	for _, t := range locker.NewestTerms(all, 0) {
		if limit > 0 && len(terms) == limit {
			break
		}
		value := byEpoch[t.Epoch]
		if value == nil {
			v, _, ok, err := r.c.Store.Get(cctx, Term, locker.TermName(t.Epoch))
			if err != nil {
				return nil, ctxErr(ctx, err)
			}
			if !ok {
				continue // pruned meanwhile
			}
			value = v
		}
		if got, err := locker.ParseTerm(value); err == nil && got.Epoch == t.Epoch {
			terms = append(terms, got)
		}
	}
	return terms, nil
}

// ---- RunLog ----

// RecordRun writes run under its slot while lease still leads the key,
// then deletes expired records unless the Store's server expires them.
func (r *Core) RecordRun(ctx context.Context, lease locker.Lease, run locker.Run) error {
	if err := locker.ValidateSlot(run.Slot); err != nil {
		return fmt.Errorf("%s: record run: slot %w", r.c.Name, err)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := r.c.Store.PutHeld(cctx, lease, Run, run.Slot, run.Record(), run.Expires); err != nil {
		return ctxErr(ctx, err)
	}
	if e, ok := r.c.Store.(Expiring); ok && e.RunsExpire() {
		return nil
	}
	// A failure leaves expired records to the next write.
	entries, err := r.c.Store.List(cctx, Run, true)
	if err != nil {
		return nil
	}
	now := r.c.Clock.Now()
	for _, e := range entries {
		if got, err := locker.ParseRun(e.Value); err == nil && !e.Kept && !got.Live(now) {
			_ = r.c.Store.Delete(cctx, Run, e.Name)
		}
	}
	return nil
}

// LookupRun reads the record of slot; ErrNoRun when there is none or it
// expired.
func (r *Core) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	if err := locker.ValidateSlot(slot); err != nil {
		return locker.Run{}, fmt.Errorf("%s: look up run: slot %w", r.c.Name, err)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	value, _, ok, err := r.c.Store.Get(cctx, Run, slot)
	if err != nil {
		return locker.Run{}, ctxErr(ctx, err)
	}
	if ok {
		if got, err := locker.ParseRun(value); err == nil && got.Slot == slot && got.Live(r.c.Clock.Now()) {
			return got, nil
		}
	}
	return locker.Run{}, fmt.Errorf("%s: slot %s: %w", r.c.Name, slot, locker.ErrNoRun)
}

// LatestRun returns the live record with the latest At among those
// stored under their own slot.
func (r *Core) LatestRun(ctx context.Context) (locker.Run, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	entries, err := r.c.Store.List(cctx, Run, true)
	if err != nil {
		return locker.Run{}, ctxErr(ctx, err)
	}
	var runs []locker.Run
	for _, e := range entries {
		if got, err := locker.ParseRun(e.Value); err == nil && got.Slot == e.Name {
			runs = append(runs, got)
		}
	}
	return locker.LatestOf(runs, r.c.Clock.Now())
}
