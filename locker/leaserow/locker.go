package leaserow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/records"
)

// Config configures a Locker.
type Config struct {
	locker.Options
	// Store holds the key's row; the Locker owns it from New on (Close
	// closes it).
	Store Store
	// Name names the backend in errors and logs: "postgres".
	Name string
	// Poll is how often a waiting candidate reads the row; 0: TTL/10,
	// between 100ms and 1s. A holder that stopped renewing is replaced
	// between TTL + allowance and TTL + allowance + Poll after its last
	// renewal; a release the store does not announce (RowNotifier) is
	// seen within Poll.
	Poll time.Duration
	// Timeout bounds each call Acquire, Leader and the releases make
	// (renewals are bounded by the caller); 0: the store's Target timeout,
	// else 5s.
	Timeout time.Duration
	// Logger receives the Locker's logs; nil: none.
	Logger hclog.Logger
	// Clock is the core's time: the standby's watch, the polls of the row
	// and of the control record, and the pauses between retries; nil:
	// Go's monotonic clock. Tests inject a fake one. The times written to
	// the store (RenewedAt, run records) stay wall-clock readings.
	Clock clock.Clock
	// Now, when set, replaces Clock's Now for the standby's watch alone
	// (tests of a standby whose clock runs fast or slow).
	Now func() time.Time
	// ControlPoll is the pace of WaitControl's reads (or probes) where
	// the store has no notice of writes; 0: TTL/3, at least
	// locker.ControlPoll. Retries
	// after a failure are paced by the records core (records.WaitRetryMin).
	ControlPoll time.Duration
}

// Locker campaigns for one key through a Store. It implements
// locker.Locker, locker.RunLog, locker.History, locker.Controls and
// locker.Targeter.
type Locker struct {
	opts    locker.Options
	store   Store
	name    string
	poll    time.Duration
	timeout time.Duration
	log     hclog.Logger
	clock   clock.Clock
	now     func() time.Time // the standby's watch
	ctlPoll time.Duration    // WaitControl's pace (Config.ControlPoll)

	*records.Core // the key's records, on the Store (records.go)
}

var (
	_ locker.Locker         = (*Locker)(nil)
	_ locker.RunLog         = (*Locker)(nil)
	_ locker.History        = (*Locker)(nil)
	_ locker.Controls       = (*Locker)(nil)
	_ locker.Targeter       = (*Locker)(nil)
	_ locker.HolderVersions = (*Locker)(nil)
)

// New builds a Locker on cfg.Store. It makes no call to the store.
func New(cfg Config) (*Locker, error) {
	if cfg.Store == nil {
		return nil, errors.New("leaserow: no store")
	}
	if cfg.TTL <= 0 {
		return nil, &locker.ConfigError{Field: "TTL", Rule: "must be positive"}
	}
	l := &Locker{opts: cfg.Options, store: cfg.Store, name: cfg.Name, poll: cfg.Poll, timeout: cfg.Timeout, log: cfg.Logger,
		clock: clock.Or(cfg.Clock), now: cfg.Now, ctlPoll: cfg.ControlPoll}
	if l.now == nil {
		l.now = l.clock.Now
	}
	if l.ctlPoll <= 0 {
		// Once per renew interval (TTL/3 by default), as the holder's
		// renewals: an idle holder wakes at its own pace, and a step-down
		// or pause reaches it within one renew interval.
		l.ctlPoll = max(locker.ControlPoll, cfg.TTL/3)
	}
	if l.name == "" {
		l.name = "leaserow"
	}
	if l.poll <= 0 {
		// A standby's read is how soon it sees a release the store does
		// not announce (DynamoDB): kept at TTL/10, at most a second,
		// at least 100ms, for the failover's sake (DESIGN §1.12).
		l.poll = min(max(cfg.TTL/10, 100*time.Millisecond), time.Second)
	}
	if l.timeout <= 0 {
		if _, t := cfg.Store.Target(); t > 0 {
			l.timeout = t
		} else {
			l.timeout = 5 * time.Second
		}
	}
	if l.log == nil {
		l.log = hclog.NewNullLogger()
	}
	l.Core = records.New(records.Config{Store: rowRecords{l, cfg.Store}, Name: l.name, Key: l.opts.Key,
		Timeout: l.timeout, Log: l.log, Clock: sleeper{l.clock}})
	return l, nil
}

// Target is the store's: what a single attempt talks to, and for how long.
func (l *Locker) Target() (string, time.Duration) {
	addr, _ := l.store.Target()
	return addr, l.timeout
}

// Close closes the store. It does not release a held lease.
func (l *Locker) Close() error { return l.store.Close() }

// token is a fresh random token: a term or a version.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// read reads the row within the Locker's timeout. ok is false when there
// is none.
func (l *Locker) read(ctx context.Context) (Row, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	r, err := l.store.Read(cctx)
	switch {
	case errors.Is(err, ErrNoRow):
		return Row{}, false, nil
	case err != nil:
		if ctx.Err() != nil {
			return Row{}, false, ctx.Err()
		}
		return Row{}, false, err
	}
	return r, true, nil
}

// claim is the row this candidate writes to take the key under term.
func (l *Locker) claim(term string) Row {
	h := locker.NewHolder(l.opts)
	return Row{Term: term, Holder: h, Contract: observe.Contract, TTL: l.opts.TTL,
		Version: token(), RenewedAt: time.Now().UTC()}
}

// errTaken means another candidate's write came first; the caller reads
// again.
var errTaken = errors.New("another candidate wrote first")

// Acquire waits until this candidate holds the key's row and returns the
// leadership: it creates the row on a fresh key, takes a row its holder
// released at once, and takes a row whose holder follows the
// observer-clock contract, or a row such a holder left deleted or emptied
// without a release, once it has stayed unchanged for the TTL that holder
// declared plus observe.Allowance, on our own clock (DESIGN §1.12; see
// standby). Every take is conditioned on the version read. With
// Options.NoWait a row that is held, or left by a holder gone silent, is
// ErrHeld at once: a single attempt does not wait a TTL out.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	term := token()
	sb := &standby{now: l.now, own: l.opts.TTL}
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	warned, failing := false, false
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Taken before the read: a release after it ends the wait below.
		freed := l.rowChanges()
		cur, exists, err := l.read(ctx)
		var v verdict
		if err == nil {
			v, err = sb.see(cur, exists, func() (bool, error) { return l.traced(ctx) })
		}
		if err != nil {
			if errors.Is(err, locker.ErrRefused) || l.opts.NoWait || ctx.Err() != nil {
				return nil, err
			}
			if !failing {
				l.log.Warn("reading the lease row failed; retrying", "error", err)
				failing = true
			} else {
				l.log.Debug("reading the lease row failed; retrying", "error", err)
			}
			if !clock.Sleep(ctx, l.clock, backoff.Next(), nil) {
				return nil, ctx.Err()
			}
			continue
		}
		backoff.Reset()
		failing = false
		wait := l.poll
		switch {
		case v.free:
			ls, err := l.take(ctx, cur, exists, term)
			if !errors.Is(err, errTaken) {
				return ls, err
			}
			continue
		case l.opts.NoWait && v.silent:
			return nil, fmt.Errorf("%s: %w: the lease row was %s without a release (by hand?): its holder may still be stopping its job; a waiting candidate takes the key once a TTL has passed (BACKENDS.md, \"Hand edits\")",
				l.name, locker.ErrHeld, v.how)
		case l.opts.NoWait:
			return nil, fmt.Errorf("%s: %w: held by %q", l.name, locker.ErrHeld, cur.Holder.ID)
		case v.forever:
			if !warned {
				l.log.Warn("the lease row is held by a holder that does not follow leaderrun's observer-clock contract; waiting until it is released",
					"key", l.opts.Name(), "holder", cur.Holder.ID)
				warned = true
			}
		case v.left > 0:
			wait = min(wait, v.left)
			if v.silent && !v.told {
				l.log.Warn("the lease row was "+v.how+" without a release (by hand?): waiting one TTL of the holder before taking the key",
					"key", l.opts.Name(), "ttl", v.ttl)
			}
		default:
			if v.silent {
				l.log.Info("the lease row was "+v.how+" without a release and has stayed so for a TTL; taking over", "key", l.opts.Name(), "ttl", v.ttl)
			} else {
				l.log.Info("holder stopped renewing; taking over", "holder", cur.Holder.ID, "ttl", v.ttl)
			}
			ls, err := l.take(ctx, cur, exists, term)
			if !errors.Is(err, errTaken) {
				return ls, err
			}
			continue
		}
		if !clock.Sleep(ctx, l.clock, wait, freed) {
			return nil, ctx.Err()
		}
	}
}

// traced asks a Tracer store whether the key was held before; false for
// other stores.
func (l *Locker) traced(ctx context.Context) (bool, error) {
	t, ok := l.store.(Tracer)
	if !ok {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return t.Traced(cctx)
}

// rowChanges is the store's RowNotifier channel; nil when it has none.
func (l *Locker) rowChanges() <-chan struct{} {
	if n, ok := l.store.(RowNotifier); ok {
		return n.RowChanges()
	}
	return nil
}

// take writes our claim: a Create when the key has no row, else a Take
// conditioned on cur's version. errTaken: someone else wrote first.
func (l *Locker) take(ctx context.Context, cur Row, exists bool, term string) (locker.Lease, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	row := l.claim(term)
	var epoch uint64
	var err error
	sent := time.Now()
	answered := true
	if exists {
		epoch, err = l.store.Take(cctx, cur.Version, row)
	} else {
		epoch, err = l.store.Create(cctx, row)
	}
	if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, locker.ErrRefused) && ctx.Err() == nil {
		// The write may have happened with its answer lost: if the row
		// is our claim, it is ours (the supervisor's first renewal,
		// conditioned on it, gives the deadline), else a row left with
		// our term would be waited out for a TTL.
		if cur, ok, rerr := l.read(ctx); rerr == nil && ok && cur.Term == term && cur.Version == row.Version {
			l.log.Debug("the answer to our claim was lost, but the row is ours", "error", err)
			epoch, err, answered = cur.Epoch, nil, false
		}
	}
	switch {
	case errors.Is(err, ErrConflict):
		return nil, fmt.Errorf("%s: %w", l.name, errTaken)
	case err != nil || ctx.Err() != nil:
		// A store may finish a claim the caller gave up (DynamoDB's two
		// writes): withdrawn like one whose write was cut short.
		if ctx.Err() != nil {
			l.withdraw(term, row.Version)
			return nil, ctx.Err()
		}
		return nil, err
	}
	row.Epoch = epoch
	if exists && epoch <= cur.Epoch {
		// Give the row back at once: we cannot lead with a safe epoch.
		rctx, rcancel := context.WithTimeout(context.Background(), l.timeout)
		defer rcancel()
		_ = l.store.Clear(rctx, row, token())
		return nil, fmt.Errorf("%s: %w: the new epoch %d is not greater than the previous holder's %d: the store's epoch counter went back",
			l.name, locker.ErrRefused, epoch, cur.Epoch)
	}
	l.log.Debug("acquired", "key", l.opts.Name(), "epoch", epoch)
	ls := &lease{l: l, term: term, row: row}
	if answered {
		// The claim is a renewal too: a write of the whole row under a
		// version only we know, which every standby counts the TTL from
		// as it sees it change, at or after our send (DESIGN §1.2).
		ls.confirmed = sent
	}
	return ls, nil
}

// withdraw gives back a claim whose write was cut short by the caller's
// context: the write may have landed, and a claim nobody renews would hold
// the key for a whole TTL (a --holders candidate cancels its other slots'
// attempts the moment it wins one, DESIGN §1.15). Only our own claim,
// unchanged since, is cleared.
func (l *Locker) withdraw(term, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	cur, ok, err := l.read(ctx)
	if err != nil || !ok || cur.Term != term || cur.Version != version {
		return
	}
	if err := l.store.Clear(ctx, cur, token()); err != nil {
		l.log.Debug("withdrawing a claim cut short failed; it expires on its own", "error", err)
		return
	}
	l.log.Debug("withdrew a claim whose write was cut short", "key", l.opts.Name())
}

// Leader reads the row's holder. A free row, or none, is ErrNoLeader. How
// long the holder has left is not known: only its own clock tells.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	h, _, err := l.holder(ctx, true)
	return h, err
}

// holder reads the row's holder, with its epoch, and the row. A release
// leaves the row: no row is a key never used, unless traced is set and
// the store shows a trace of a holder (a row deleted by hand).
func (l *Locker) holder(ctx context.Context, traced bool) (locker.Holder, Row, error) {
	cur, exists, err := l.read(ctx)
	switch {
	case err != nil:
		return locker.Holder{}, cur, err
	case !exists && traced:
		if t, err := l.traced(ctx); err != nil || t {
			return locker.Holder{}, cur, fmt.Errorf("%s: %w for key %q: its lease row was deleted (by hand?)", l.name, locker.ErrNoLeader, l.opts.Name())
		}
		fallthrough
	case !exists:
		return locker.Holder{}, cur, l.neverUsed()
	case cur.Term == "":
		return locker.Holder{}, cur, fmt.Errorf("%s: %w for key %q", l.name, locker.ErrNoLeader, l.opts.Name())
	}
	h := cur.Holder
	h.Epoch = cur.Epoch
	return h, cur, nil
}

// neverUsed is Leader's answer for a key without a row: where the store
// looked, in its words where it has them.
func (l *Locker) neverUsed() error {
	if p, ok := l.store.(Placer); ok {
		where, fields := p.Place()
		return &locker.NeverUsedError{Key: l.opts.Name(), Where: where, Fields: append(fields, "Prefix")}
	}
	addr, _ := l.store.Target()
	return &locker.NeverUsedError{Key: l.opts.Name(), Where: l.name + " " + addr, Fields: []string{"Prefix"}}
}

// handle is a lease's Handle: the key and the term, which no key contains
// a space of.
func handle(key, term string) string { return key + " " + term }

// ReleaseHandle frees the row if the leadership the handle names still
// holds it (see Lease.Handle).
func (l *Locker) ReleaseHandle(ctx context.Context, h string) error {
	key, term, ok := strings.Cut(h, " ")
	if !ok || key != l.opts.Name() || term == "" {
		return fmt.Errorf("%s: %w: %q is not a handle for key %q", l.name, locker.ErrRefused, h, l.opts.Name())
	}
	return l.clear(ctx, term, Row{}, false)
}

// clear frees the row if term holds it, conditioned on last (when known)
// or on the row read back while it carries term, at most three writes.
func (l *Locker) clear(ctx context.Context, term string, last Row, known bool) error {
	for range 3 {
		if !known {
			cur, exists, err := l.read(ctx)
			if err != nil {
				return err
			}
			if !exists || cur.Term != term {
				return nil // not ours any more: nothing to give back
			}
			last = cur
		}
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		err := l.store.Clear(cctx, last, token())
		cancel()
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, ErrConflict):
			return err
		}
		known = false
	}
	return fmt.Errorf("%s: release of key %q: conflicting writes kept coming", l.name, l.opts.Name())
}

// ID is the candidate's id (Options.ID).
func (l *Locker) ID() string { return l.opts.ID }

// HolderVersion reads the row's holder as Leader does, with the row's
// version and the TTL its holder declared (locker.HolderVersions).
func (l *Locker) HolderVersion(ctx context.Context) (locker.Holder, string, time.Duration, error) {
	h, cur, err := l.holder(ctx, false)
	if err != nil {
		return locker.Holder{}, "", 0, err
	}
	var ttl time.Duration
	if cur.Contract == observe.Contract {
		ttl = cur.TTL
	}
	return h, cur.Version, ttl, nil
}
