//go:build linux

package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// ControlConfig is the operator's say over this candidate (DESIGN §1.16):
// the key's control record (pause, step-down), --priority and
// --health-cmd. None of it can make a candidate lead: a record or a failed
// check only makes a holder stop and release as on SIGTERM, and a
// candidate hold back from campaigning.
type ControlConfig struct {
	// Name is the name the lease holds (the key, or a slot key), and ID
	// this candidate's --id: what a step-down names.
	Name, ID string
	// Priority is --priority; above 0, a waiting candidate asks a holder
	// of a lower priority to hand over once it has been ready for
	// PreemptAfter.
	Priority     int
	PreemptAfter time.Duration
	// Health is --health-cmd and its settings; nil checks nothing.
	Health *HealthCheck
	// Shared, when set, is the running check the supervisor reads instead
	// of starting Health itself (StartHealth).
	Shared *Health
}

// DefaultPreemptAfter is --preempt-after when not given.
const DefaultPreemptAfter = 30 * time.Second

// maxPreemptBackoff caps how far a preferred candidate whose terms keep
// ending early stretches its wait before it preempts again.
const maxPreemptBackoff = 16

// errHeldBack cancels a campaign that the control record or the health
// check holds back.
var errHeldBack = errors.New("held back from campaigning")

// controlReadTimeout bounds one read or write of the control record on the
// campaign's path.
const controlReadTimeout = 3 * time.Second

// controlWatch keeps the key's control record as the backend last said it
// was, read by one WaitControl at a time.
type controlWatch struct {
	ctl    locker.Controls
	mu     sync.Mutex
	cur    locker.Control
	change chan struct{} // closed and replaced at each change
}

// startControl watches the key's control record until ctx ends; nil when
// the backend keeps none.
func (s *Supervisor) startControl(ctx context.Context) *controlWatch {
	ctl, ok := locker.ControlsOf(s.cfg.Locker)
	if !ok {
		return nil
	}
	if _, single := locker.As[locker.SingleAttempt](s.cfg.Locker); single {
		// --no-wait: one attempt; the won term still reads the record.
		return &controlWatch{ctl: ctl, change: make(chan struct{})}
	}
	w := &controlWatch{ctl: ctl, change: make(chan struct{})}
	go func() {
		version := "?" // matches no record: the first wait returns at once
		for ctx.Err() == nil {
			c, err := ctl.WaitControl(ctx, version)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Debug("cannot read the control record; trying again", "error", err)
					s.sleep(ctx, time.Second)
				}
				continue
			}
			version = c.Version
			w.set(c)
		}
	}()
	return w
}

func (w *controlWatch) set(c locker.Control) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur = c
	close(w.change)
	w.change = make(chan struct{})
}

// get returns the record and a channel closed at its next change; a nil
// watch gives the empty record and a channel that never closes.
func (w *controlWatch) get() (locker.Control, <-chan struct{}) {
	if w == nil {
		return locker.Control{}, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur, w.change
}

// read reads the record afresh (a linearizable read). When the backend
// does not answer it returns the last one watched and the error.
func (w *controlWatch) read() (locker.Control, error) {
	ctx, cancel := context.WithTimeout(context.Background(), controlReadTimeout)
	defer cancel()
	c, err := w.ctl.Control(ctx)
	if err != nil {
		c, _ = w.get()
		return c, err
	}
	w.adopt(c)
	return c, nil
}

// adopt makes c, read afresh, the record watched, if it is another
// version.
func (w *controlWatch) adopt(c locker.Control) {
	w.mu.Lock()
	newer := c.Version != w.cur.Version
	w.mu.Unlock()
	if newer {
		w.set(c)
	}
}

// heldBack says why this candidate must not campaign now ("" when it may),
// from c and the health check, and until when at the latest the reason
// holds (zero: until something changes).
func (s *Supervisor) heldBack(c locker.Control) (why string, until time.Time) {
	if why, until := s.zombies.Hold(time.Now()); why != "" {
		return why, until
	}
	if s.health != nil {
		st := s.health.state()
		switch {
		case !st.checked:
			return "waiting for the first health check", time.Time{}
		case !st.ok:
			return "the health check fails", time.Time{}
		}
	}
	cc := s.cfg.Control
	now := time.Now()
	if !c.Holds(cc.Name, cc.ID, s.steppedDown, now) {
		return "", time.Time{}
	}
	if p := c.Pause; p != nil {
		return fmt.Sprintf("paused by %s since %s: %s", p.By, p.Since.Format(time.RFC3339), p.Reason), time.Time{}
	}
	sd := c.StepDown
	if sd.To != "" {
		return fmt.Sprintf("the key is handed over to %s", sd.To), sd.Until
	}
	return "this candidate stepped down; another takes the key first", sd.Until
}

// heldBackNow is heldBack of the control record as last seen.
func (s *Supervisor) heldBackNow() string {
	var c locker.Control
	if s.ctl != nil {
		c, _ = s.ctl.get()
	}
	why, _ := s.heldBack(c)
	return why
}

// changes returns channels closed at the next change of the control record
// or of the health check.
func (s *Supervisor) changes() (ctlC, healthC <-chan struct{}) {
	_, ctlC = s.ctl.get()
	if s.health != nil {
		healthC = s.health.state().change
	}
	return ctlC, healthC
}

// awaitFree waits while the candidate is held back, saying so once per
// reason; it reports false when ctx ended first.
func (s *Supervisor) awaitFree(ctx context.Context) bool {
	said := ""
	for {
		if ctx.Err() != nil {
			return false
		}
		ctlC, healthC := s.changes()
		c, _ := s.ctl.get()
		why, until := s.heldBack(c)
		if f := s.cfg.Events.HeldBack; f != nil {
			f(why, c.Pause)
		}
		if why == "" {
			if said != "" {
				s.log.Info("campaigning again", "was", said)
			}
			return true
		}
		if why != said {
			s.log.Info("not campaigning", "reason", why)
			said = why
		}
		var untilC <-chan time.Time
		t := time.NewTimer(time.Until(until))
		if !until.IsZero() {
			untilC = t.C
		}
		select {
		case <-ctx.Done():
		case <-ctlC:
		case <-healthC:
		case <-untilC:
		}
		t.Stop()
		if ctx.Err() != nil {
			return false
		}
	}
}

// acquire is Locker.Acquire, cancelled with errHeldBack as soon as the
// candidate is held back, and with a preemption running beside it for a
// candidate of a priority.
func (s *Supervisor) acquire(ctx context.Context) (locker.Lease, error) {
	if s.ctl == nil && s.health == nil {
		return s.cfg.Locker.Acquire(ctx)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ctlC, healthC := s.changes()
			c, _ := s.ctl.get()
			if why, _ := s.heldBack(c); why != "" {
				cancel(errHeldBack)
				return
			}
			select {
			case <-cctx.Done():
				return
			case <-ctlC:
			case <-healthC:
			}
		}
	}()
	if s.cfg.Control.Priority > 0 && s.ctl != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.preempt(cctx)
		}()
	}
	lease, err := s.cfg.Locker.Acquire(cctx)
	cancel(nil)
	wg.Wait()
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errHeldBack) {
		return nil, errHeldBack
	}
	return lease, err
}

// refuseWon reads the control record afresh once a term is won and says
// why it must be given back before any child starts ("" to keep it): a
// pause or a handover to another candidate that came while Acquire
// waited. It marks a step-down this term answers as taken.
func (s *Supervisor) refuseWon(lease locker.Lease) string {
	if s.ctl == nil {
		why, _ := s.heldBack(locker.Control{})
		return why
	}
	c, err := s.controlAfterWin(lease)
	if err != nil {
		// The record as watched may predate a pause: only a read after
		// the win shows one written before it (§1.16).
		return errControlUnread + ": " + err.Error()
	}
	if why, _ := s.heldBack(c); why != "" {
		return why
	}
	s.steppedDown = 0
	if sd := c.StepDown; sd != nil && sd.Key == s.cfg.Control.Name && sd.Taken == 0 && sd.Epoch < lease.Epoch() {
		go s.markTaken(lease.Epoch())
	}
	return ""
}

// controlAfterWin reads the control record after the win: the read the
// acquire made in the step that found the key won, where the lease has
// one (locker.ControlAtWin), else a read of its own.
func (s *Supervisor) controlAfterWin(lease locker.Lease) (locker.Control, error) {
	if cw, ok := lease.(locker.ControlAtWin); ok {
		if c, ok, err := cw.ControlAtWin(); ok {
			if err == nil {
				s.ctl.adopt(c)
			}
			return c, err
		}
	}
	return s.ctl.read()
}

// errControlUnread starts the reason a won term is given back when the
// control record could not be read after the win.
const errControlUnread = "cannot read the control record"

// markTaken writes that the term epoch took the key after a step-down, so
// that the candidates it held back campaign again.
func (s *Supervisor) markTaken(epoch uint64) {
	for range 3 {
		c, err := s.ctl.read()
		if err != nil {
			s.log.Warn("cannot mark the step-down answered; it ends at its timeout", "error", err)
			return
		}
		sd := c.StepDown
		if sd == nil || sd.Key != s.cfg.Control.Name || sd.Taken != 0 || sd.Epoch >= epoch {
			return
		}
		taken := *sd
		taken.Taken = epoch
		c.StepDown = &taken
		ctx, cancel := context.WithTimeout(context.Background(), controlReadTimeout)
		_, err = s.ctl.ctl.SetControl(ctx, c)
		cancel()
		if err == nil {
			s.log.Debug("step-down answered", "asked_of", sd.Epoch, "epoch", epoch)
			return
		}
		if !errors.Is(err, locker.ErrConflict) {
			s.log.Warn("cannot mark the step-down answered; it ends at its timeout", "error", err)
			return
		}
	}
}

// askedToGo says why the term must end now for the operator ("" when it
// may go on): the control record pauses the key (paused) or asks this
// term to step down, or the health check failed --health-failures times
// in a row.
func (s *Supervisor) askedToGo(l *leadership) (why string, paused bool) {
	if s.health != nil {
		if st := s.health.state(); st.fails >= s.health.cfg.Failures {
			return fmt.Sprintf("the health check failed %d times in a row", st.fails), false
		}
	}
	c, _ := s.ctl.get()
	why, _ = c.AsksToStepDown(s.cfg.Control.Name, l.lease.Epoch(), time.Now())
	return why, why != "" && c.Pause != nil
}

// handoverWindow is how long a preemption reserves the key for the
// candidate that asked: long enough for a holder that cannot release to
// lose its lease, within the bound of every reservation (a holder with a
// TTL of more than half an hour that neither acts nor renews lets any
// candidate take the key after it, not only the preferred one).
func (s *Supervisor) handoverWindow() time.Duration {
	return min(max(10*time.Second, 2*s.cfg.TTL+s.cfg.KillGrace), locker.MaxReservation)
}

// preempt runs while a candidate of a priority campaigns: once a holder of
// a lower priority has led the same term for the candidate's whole
// preempt wait, it asks that term to hand over to this candidate. Holders
// are read once a renew interval (at least a second): the price of a
// priority (DESIGN §5).
func (s *Supervisor) preempt(ctx context.Context) {
	cc := s.cfg.Control
	every := max(s.cfg.RenewInterval, time.Second)
	var seen uint64
	var since time.Time
	for {
		rctx, cancel := context.WithTimeout(ctx, controlReadTimeout)
		h, err := s.cfg.Locker.Leader(rctx)
		cancel()
		now := time.Now()
		switch {
		case err != nil || h.Priority >= cc.Priority || h.ID == cc.ID:
			seen = 0
		case h.Epoch != seen:
			seen, since = h.Epoch, now
		case now.Sub(since) >= s.preemptWait:
			if s.askHandover(ctx, h) {
				s.preempted.Store(true)
			}
			seen = 0
		}
		if !s.sleep(ctx, every) {
			return
		}
	}
}

// askHandover writes a step-down of h's term to this candidate, unless
// the key is paused or another step-down is under way.
func (s *Supervisor) askHandover(ctx context.Context, h locker.Holder) bool {
	rctx, cancel := context.WithTimeout(ctx, controlReadTimeout)
	defer cancel()
	c, err := s.ctl.ctl.Control(rctx)
	if err != nil || c.Pause != nil {
		return false
	}
	now := time.Now().UTC()
	if c.StepDown.Pending(now) {
		return false
	}
	cc := s.cfg.Control
	c.StepDown = &locker.StepDown{
		Key: cc.Name, Epoch: h.Epoch, To: cc.ID, By: "priority",
		At: now.Truncate(time.Millisecond), Until: now.Add(s.handoverWindow()).Truncate(time.Millisecond),
	}
	if _, err := s.ctl.ctl.SetControl(rctx, c); err != nil {
		s.log.Debug("cannot ask the holder to hand over", "error", err)
		return false
	}
	s.log.Info("asked the holder to hand over: this candidate has a higher priority",
		"holder", h.ID, "holder_priority", h.Priority, "priority", cc.Priority, "epoch", h.Epoch)
	return true
}

// afterPreemptedTerm stretches the preempt wait after a term that this
// candidate won by preempting and that ended within the wait (a preferred
// host that keeps failing), and resets it after one that lasted.
func (s *Supervisor) afterPreemptedTerm(lasted time.Duration) {
	base := s.cfg.Control.PreemptAfter
	if !s.preempted.Swap(false) {
		return
	}
	if lasted < base*2 {
		s.preemptWait = min(s.preemptWait*2, base*maxPreemptBackoff)
		s.log.Info("the term won by preemption ended early; waiting longer before preempting again", "preempt_after", s.preemptWait)
		return
	}
	s.preemptWait = base
}

// singleAttempt reports whether the campaign is one attempt (--no-wait).
func (s *Supervisor) singleAttempt() bool {
	_, ok := locker.As[locker.SingleAttempt](s.cfg.Locker)
	return ok
}

// awaitFirstCheck waits for the first health check, and says why one
// attempt must not campaign: the check failed, or ctx ended first.
func (s *Supervisor) awaitFirstCheck(ctx context.Context) string {
	if s.health == nil {
		return ""
	}
	for {
		st := s.health.state()
		if st.checked {
			if !st.ok {
				return "the health check fails"
			}
			return ""
		}
		select {
		case <-ctx.Done():
			return "stopped before the first health check"
		case <-st.change:
		}
	}
}
