//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// --holders N (DESIGN §1.15): slot s of key K is the leadership of its own
// key, locker.SlotKey(K, s). A candidate campaigns for every slot at once
// and keeps the first it wins; every other attempt is cancelled, and one
// that won anyway is released before any child starts, so a process never
// holds two slots. From then on the run is today's single-key run of the
// slot's key: its guard, deadline, containment, release and history.

// slotWon is the outcome of a slot campaign that won.
type slotWon struct {
	Slot  int
	Lease locker.Lease
}

// errAllHeld is the outcome of a --no-wait campaign whose every slot is
// held by another candidate; it wraps locker.ErrHeld.
var errAllHeld = fmt.Errorf("every slot is %w", locker.ErrHeld)

// slotResult is what one slot's campaign ended with.
type slotResult struct {
	slot  int
	lease locker.Lease
	err   error
}

// raceSlots campaigns for every slot's Locker at once and returns the
// first slot won. It returns only once every attempt has ended, and then
// holds at most the slot it returns: an attempt that won after another
// was released at once. A failure worth retrying is retried on that slot
// with backoff; a refusal (locker.ErrRefused) ends the whole campaign;
// with --no-wait (each Locker a locker.OneAttempt) every slot held is
// errAllHeld. ctx ending is ctx's error.
func raceSlots(ctx context.Context, slots []locker.Locker, log hclog.Logger) (slotWon, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan slotResult, len(slots))
	for s, lk := range slots {
		go func() { results <- campaignSlot(rctx, s, lk, log) }()
	}
	var won *slotResult
	var fatal error
	held := 0
	for range slots {
		r := <-results
		switch {
		case r.err == nil && won == nil && fatal == nil:
			won = &r
			cancel() // the other slots' attempts end
		case r.err == nil:
			// Won in the race, after another slot or a refusal: given
			// back before anything starts.
			log.Debug("released a second slot won in the race", "slot", r.slot, "epoch", r.lease.Epoch())
			releaseNow(r.lease, log)
		case errors.Is(r.err, locker.ErrRefused) && fatal == nil:
			fatal = r.err
			cancel()
		case errors.Is(r.err, locker.ErrHeld):
			held++
		}
	}
	switch {
	case fatal != nil:
		if won != nil {
			releaseNow(won.lease, log)
		}
		return slotWon{}, fatal
	case won != nil && ctx.Err() == nil:
		return slotWon{Slot: won.slot, Lease: won.lease}, nil
	case won != nil:
		releaseNow(won.lease, log)
	case held == len(slots):
		return slotWon{}, errAllHeld
	}
	return slotWon{}, ctx.Err()
}

// campaignSlot campaigns for one slot until it wins, ctx ends, the
// backend refuses, or (--no-wait) the slot is held.
func campaignSlot(ctx context.Context, s int, lk locker.Locker, log hclog.Logger) slotResult {
	backoff := retry.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for {
		lease, err := lk.Acquire(ctx)
		switch {
		case err == nil:
			return slotResult{slot: s, lease: lease}
		case ctx.Err() != nil:
			return slotResult{slot: s, err: ctx.Err()}
		case errors.Is(err, locker.ErrHeld), errors.Is(err, locker.ErrRefused):
			return slotResult{slot: s, err: err}
		}
		wait := backoff.Next()
		log.Warn("campaign failed, retrying", "slot", s, "error", err, "retry_in", wait)
		if !retry.Sleep(ctx, wait) {
			return slotResult{slot: s, err: ctx.Err()}
		}
	}
}

// releaseNow gives a lease back with the release timeout of a run.
func releaseNow(lease locker.Lease, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		log.Warn("release of a slot failed; it expires on its own", "error", err)
	}
}

// errHoldersDiffer is a holder of the key that runs with another
// --holders than ours.
var errHoldersDiffer = errors.New("candidates disagree on --holders")

// checkHolders reads the holders of the slots and refuses, naming both
// numbers, when a live one was started with another --holders than n. It
// reads slots 0..n (slot n is held only by a candidate with more slots),
// skipping own (-1: none). An unreadable slot, or one whose record is not
// written yet, is not a disagreement: the
// check is done again once a slot is won, and a holder is found by every
// later candidate's check.
func checkHolders(ctx context.Context, key string, n, own int, read func(ctx context.Context, slot int) (locker.Holder, error)) error {
	for s := 0; s <= n && s < locker.MaxHolders; s++ {
		if s == own {
			continue
		}
		h, err := read(ctx, s)
		if err != nil || h.ID == "" {
			// Unreadable, free, or its record not written yet.
			continue
		}
		theirs := max(h.Holders, 1)
		if theirs != n {
			return fmt.Errorf("%w: --holders %d, but slot %d of key %q is held by %s with --holders %d", errHoldersDiffer, n, s, key, h.ID, theirs)
		}
	}
	return nil
}

// preWon is the winning slot's Locker whose first Acquire returns the
// lease the slot campaign won; a later one campaigns for the same slot
// (the supervisor, with Config.Rerace, returns instead: every campaign
// after the first races all slots again, run.go). Closed before that first Acquire (a run whose
// setup failed after the win: metrics listener, containment, once-per),
// it releases the won lease, so the slot is not left held by a process
// that has gone until its TTL.
type preWon struct {
	locker.Locker
	lease locker.Lease
	log   hclog.Logger
}

func (p *preWon) Close() error {
	if l := p.lease; l != nil {
		p.lease = nil
		p.log.Debug("releasing the slot won: the run ended before it started", "epoch", l.Epoch())
		releaseNow(l, p.log)
	}
	return p.Locker.Close()
}

func (p *preWon) Acquire(ctx context.Context) (locker.Lease, error) {
	if l := p.lease; l != nil {
		p.lease = nil
		return l, nil
	}
	return p.Locker.Acquire(ctx)
}

// Unwrap lets locker.As find the slot Locker's capabilities.
func (p *preWon) Unwrap() locker.Locker { return p.Locker }
