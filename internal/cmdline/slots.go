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
	"github.com/leaderrun/leaderrun/locker/observe"
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
	var failed error
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
		// As a key without slots: a WARN for a new failure, INFO again.
		retry.SayFailure(log, failed, err, "campaign failed, retrying", "slot", s, "error", err, "retry_in", wait)
		failed = err
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

// Agreement on N (DESIGN §1.15). N is a property of the key: a candidate
// is refused while a live holder of any slot of the key was started with
// another N. Slot keys cannot be listed on every backend, so the key's
// control record carries a bound, Control.Holders: every candidate that
// won a slot raises it to its own N (a write only when it is lower)
// before it reads the other slots, and a candidate reads the slots below
// the bound and below its own N, and slot N. The argument, for two
// candidates X and Y with N(X) < N(Y) that both won: Y read X's slot
// after Y made the bound at least N(Y); if X held it then, Y was refused.
// Else X won after that, and X reads the bound after its own win: it is
// still at least N(Y) unless someone lowered it in between, and X then
// reads Y's slot and is refused. A lowering is a write conditioned on the
// version of the bound its writer read before its own slot reads and read
// again, unchanged, after them: a writer Z can only lower it below N(Y)
// if its reads found no holder at or above N(Z). Z held its own slot from
// before its first read of the bound until after its lowering, and Y's
// reads ran between two reads of the bound that found it unchanged, so
// either Z's lowering came before Y's second read (Y sees a new version
// and checks again) or Z's version is the one Y saw. Then either Z won
// before Y read Z's slot, and held it through Y's reads: Y saw Z and was
// refused; or Z won later, and its own reads found Y: Z lowered nothing.

// agreement is the --holders check of one candidate of key.
type agreement struct {
	key string
	n   int
	// ctl is the key's control record; nil when the backend keeps none
	// (only slots 0..n are read then).
	ctl locker.Controls
	// read reads the holder of one slot (slotReaderOf).
	read slotReader
	log  hclog.Logger
	// pause is the wait between the reads that confirm a holder of
	// another N (confirmReads of them); poll, between the reads that
	// watch a record that only its holder's renewals change.
	pause, poll time.Duration
	// dead are the slots whose record, at this version, was seen
	// unchanged for its holder's TTL and allowance: a holder gone without
	// releasing, on a backend that expires nothing.
	dead map[int]string
}

// slotRecord is a slot's holder as read, with the version of its record
// and the TTL its holder declared where the backend says them
// (locker.HolderVersions): there a holder that died without releasing
// is read as holder until someone takes its slot over.
type slotRecord struct {
	locker.Holder
	version string
	ttl     time.Duration
}

// slotReader reads the holder of one slot of the key.
type slotReader func(ctx context.Context, slot int) (slotRecord, error)

// slotReaderOf reads a slot's holder with lk: with its record's version
// where lk says it, else with Leader.
func slotReaderOf(ctx context.Context, lk locker.Locker) (slotRecord, error) {
	if hv, ok := locker.As[locker.HolderVersions](lk); ok {
		h, v, ttl, err := hv.HolderVersion(ctx)
		return slotRecord{Holder: h, version: v, ttl: ttl}, err
	}
	h, err := lk.Leader(ctx)
	return slotRecord{Holder: h}, err
}

// newAgreement is the check of a candidate of n slots of key.
func newAgreement(key string, n int, ctl locker.Controls, read slotReader, log hclog.Logger) *agreement {
	return &agreement{key: key, n: n, ctl: ctl, read: read, log: log, pause: confirmPause, poll: time.Second, dead: map[int]string{}}
}

// confirmReads is how often a slot whose holder says another N is read
// again, pause apart, before that holder counts. A record can outlive its
// holder for the moment a new holder needs to write its own (the local
// backend's lock file keeps the last record, and the next holder's flock
// comes before its record); a live holder's record stays the same.
const confirmReads = 6

// slotCheckTimeout bounds the reads of the slots in one check.
const slotCheckTimeout = 10 * time.Second

// confirmPause is agreement.pause of a run.
const confirmPause = 250 * time.Millisecond

// bound is how many slots to read with the control record saying mark:
// every slot below mark and below n, and slot n (held only by a
// candidate with more slots; one that does not raise the mark, from
// before it, is still found there).
func (a *agreement) bound(mark int) int {
	if a.n == 1 {
		// One holder: slot 0 only, its own. The bound alone says whether
		// others are to be read (one read of the record).
		return min(mark, locker.MaxHolders)
	}
	return min(max(mark, a.n+1), locker.MaxHolders)
}

// mark reads the control record's bound (1 when unset). A record that
// cannot be read, or none kept, gives ok false.
func (a *agreement) mark(ctx context.Context) (c locker.Control, mark int, ok bool) {
	if a.ctl == nil {
		return locker.Control{}, 1, false
	}
	rctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
	defer cancel()
	c, err := a.ctl.Control(rctx)
	if err != nil {
		a.log.Debug("cannot read the control record; checking --holders on the slots up to mine", "error", err)
		return locker.Control{}, 1, false
	}
	return c, max(c.Holders, 1), true
}

// setMark writes the control record c, conditioned on its version.
func (a *agreement) setMark(ctx context.Context, c locker.Control) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
	defer cancel()
	return a.ctl.SetControl(wctx, c)
}

// before is the check before campaigning: it refuses early when a live
// holder of another N is found. It writes nothing.
func (a *agreement) before(ctx context.Context) error {
	_, mark, _ := a.mark(ctx)
	_, err := a.checkHolders(ctx, -1, a.bound(mark))
	return err
}

// won is the check after winning slot own, before any child starts: it
// raises the bound to n, reads the other slots below it, and lowers it
// to n once its reads found no slot at or above n held and the bound did
// not change meanwhile. A nil error lets the run go on; so does a
// backend that cannot be read (the others' checks still find this
// holder).
func (a *agreement) won(ctx context.Context, own int) error {
	for ctx.Err() == nil {
		c, mark, ok := a.mark(ctx)
		if !ok {
			_, err := a.checkHolders(ctx, own, a.bound(1))
			return err
		}
		if mark < a.n {
			raised := c
			raised.Holders = a.n
			v, err := a.setMark(ctx, raised)
			if errors.Is(err, locker.ErrConflict) {
				continue
			}
			if err != nil {
				a.log.Warn("cannot record --holders in the control record; candidates with fewer slots may not see this one", "error", err)
				_, err := a.checkHolders(ctx, own, a.bound(mark))
				return err
			}
			c, mark = raised, a.n
			c.Version = v
			a.log.Debug("raised the key's --holders bound", "holders", a.n)
		}
		unread, err := a.checkHolders(ctx, own, a.bound(mark))
		if err != nil || a.n == 1 && mark == 1 {
			// A candidate of one slot read nothing and lowers nothing:
			// no candidate of fewer slots relies on its bound.
			return err
		}
		again, _, ok := a.mark(ctx)
		if !ok {
			return nil
		}
		if again.Version != c.Version {
			a.log.Debug("the key's --holders bound changed while the slots were read; reading them again")
			continue
		}
		if mark > a.n && unread == 0 {
			// No slot at or above n is held: nobody of more slots holds.
			lowered := c
			lowered.Holders = a.n
			if a.n <= 1 {
				lowered.Holders = 0
			}
			if _, err := a.setMark(ctx, lowered); err != nil {
				a.log.Debug("cannot lower the key's --holders bound", "error", err)
			} else {
				a.log.Debug("lowered the key's --holders bound", "from", mark, "to", a.n)
			}
		}
		return nil
	}
	return nil
}

// readSlot reads slot s within slotReadTimeout.
func (a *agreement) readSlot(ctx context.Context, s int) (slotRecord, error) {
	rctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
	defer cancel()
	return a.read(rctx, s)
}

// checkHolders reads the holders of slots 0..bound-1 but own (-1: none)
// and refuses, naming both numbers, when a live one was started with
// another --holders than n and is confirmed live (confirm). unread counts
// the slots not read, whose record is not written yet, or whose holder
// turned out gone: none of them is a disagreement (the check is done
// again once a slot is won, and a holder is found by every later
// candidate's check), but a candidate lowers no bound on them.
func (a *agreement) checkHolders(ctx context.Context, own, bound int) (unread int, err error) {
	// The reads together take slotCheckTimeout at most (the watch of a
	// silent holder's record aside): a backend that does not answer
	// delays a candidate by that, not by a timeout per slot.
	by := time.Now().Add(slotCheckTimeout)
	for s := 0; s < bound && s < locker.MaxHolders; s++ {
		if s == own {
			continue
		}
		if time.Now().After(by) {
			unread++
			continue
		}
		rctx, cancel := context.WithDeadline(ctx, by)
		r, err := a.readSlot(rctx, s)
		cancel()
		switch {
		case errors.Is(err, locker.ErrNoLeader):
			continue
		case err != nil || r.ID == "":
			// Unreadable, or its record not written yet.
			unread++
			continue
		case max(r.Holders, 1) == a.n:
			continue
		case r.version != "" && a.dead[s] == r.version:
			unread++ // seen gone before: still its record
			continue
		}
		t0 := time.Now()
		h, live := a.confirm(ctx, s, r)
		by = by.Add(time.Since(t0))
		if live {
			return unread, fmt.Errorf("%w: --holders %d, but slot %d of key %q is held by %s with --holders %d", errHoldersDiffer, a.n, s, a.key, h.ID, max(h.Holders, 1))
		}
		if h.ID != "" {
			unread++ // gone without releasing: its slot is not free
		}
	}
	return unread, nil
}

// confirm reads slot s again after it was seen held by r, of another N.
// It reports true with the holder when that holder is live: where the
// backend gives the record's version and its holder declared a TTL, once
// the same holder's record changed (a renewal), and false with it once a
// read sent when that TTL and its allowance had passed on our clock since
// we first saw the record still found it the same (DESIGN §1.12: gone
// without releasing, its deadline passed before that read); elsewhere
// when the same holder is read confirmReads times pause apart. It reports
// false with a zero Holder when the slot turned out free or held by one
// of n. ctx ending first is true: nothing said that holder was gone.
func (a *agreement) confirm(ctx context.Context, s int, r slotRecord) (locker.Holder, bool) {
	since, reads := time.Now(), 0
	for {
		observed := r.version != "" && r.ttl > 0
		due := r.ttl + observe.Allowance(r.ttl)
		wait := a.pause
		if observed {
			wait = min(a.poll, max(0, due-time.Since(since)))
		} else if reads == confirmReads {
			return r.Holder, true
		}
		if !retry.Sleep(ctx, wait) {
			return r.Holder, true
		}
		reads++
		sent := time.Now()
		again, err := a.readSlot(ctx, s)
		switch {
		case errors.Is(err, locker.ErrNoLeader):
			return locker.Holder{}, false
		case err != nil || again.ID == "":
			continue // the last record read stands
		case max(again.Holders, 1) == a.n:
			return locker.Holder{}, false
		case again.ID != r.ID || again.Epoch != r.Epoch:
			// Another holder of another N: confirm that one.
			r, since, reads = again, time.Now(), 0
		case observed && again.version != r.version:
			return again.Holder, true // renewed
		case observed && sent.Sub(since) >= due:
			a.log.Info("a slot's holder of another --holders is gone: its record has not changed for its TTL", "slot", s, "holder", r.ID, "holders", max(r.Holders, 1), "ttl", r.ttl)
			a.dead[s] = r.version
			return r.Holder, false
		}
	}
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

// agreeing is the Locker of a run of one holder (--holders 1): after each
// win, before any child starts, it checks the key's --holders (one read
// of the control record; the slots above 0 too when that names more) and
// gives the won lease back when a live holder of another slot runs with
// more slots. A refusal is an Acquire error wrapping locker.ErrRefused,
// kept in refused for the run's exit.
type agreeing struct {
	locker.Locker
	agree   *agreement
	log     hclog.Logger
	refused error
}

func (a *agreeing) Acquire(ctx context.Context) (locker.Lease, error) {
	lease, err := a.Locker.Acquire(ctx)
	if err != nil {
		return lease, err
	}
	if err := a.agree.won(ctx, 0); err != nil {
		a.log.Info("giving the key back before any child starts", "epoch", lease.Epoch(), "reason", err)
		releaseNow(lease, a.log)
		a.refused = err
		return nil, fmt.Errorf("%w: %w", locker.ErrRefused, err)
	}
	return lease, nil
}

// Unwrap lets locker.As find the backend's capabilities.
func (a *agreeing) Unwrap() locker.Locker { return a.Locker }
