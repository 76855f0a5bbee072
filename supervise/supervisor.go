//go:build linux

// Package supervise is leaderrun's state machine: campaign, keep the lease,
// run the child, and stop it on a local deadline. It is the only place that
// keeps time for leadership (DESIGN §1.2-1.4, §6).
package supervise

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// Exit codes of leaderrun itself, from the one table in internal/exitcode.
const (
	ExitLost     = exitcode.Lost
	ExitNotHeld  = exitcode.NotHeld
	ExitInternal = exitcode.Internal
)

// ExitRerace is Run's outcome with Config.Rerace when the candidate is to
// campaign for every slot again. It is never an exit code of a process.
const ExitRerace = -1

// SteppedDown is the epoch of the term this candidate last stepped down
// from for the operator, 0 when it has led since or never stepped down:
// the term a Control.Holds of the same slot key keeps out.
func (s *Supervisor) SteppedDown() uint64 { return s.steppedDown }

// releaseTimeout bounds giving leadership back; after it, the lease simply
// expires on the backend.
const releaseTimeout = 5 * time.Second

// SignalCause is the cancel cause leaderrun puts on Run's context when it is
// asked to stop by a signal, so the exit code can say which one.
type SignalCause struct{ Signal syscall.Signal }

func (c SignalCause) Error() string { return "received " + c.Signal.String() }

// Supervisor runs one command under leadership of one key.
type Supervisor struct {
	cfg   Config
	log   hclog.Logger
	clock Clock
	box   *contain.Box
	// sweptClean: a sweep of this process found every leftover of the key
	// gone, so a term's sweep may be a Recheck (leftover.go). Set and
	// read by Run's goroutine only, a term's sweep before lead returns.
	sweptClean atomic.Bool
	// early is the term's sweep, started beside the confirming renewal,
	// that campaign hands to lead.
	early *termSweepRun
	// earlyGuard is the term's guard, started beside the confirming
	// renewal too; lead adopts it.
	earlyGuard *earlyGuard

	// The operator's control (control.go, health.go): the key's control
	// record and the health check as last seen, the epoch this candidate
	// last stepped down from (0: none since it last led), and its
	// preemption's wait and whether its last campaign preempted.
	ctl         *controlWatch
	health      *healthWatch
	steppedDown uint64
	// pausedOut: the last term handed over ended for a pause, not a
	// step-down or failed health checks.
	pausedOut   bool
	preemptWait time.Duration
	preempted   atomic.Bool

	// The job's notify socket (notify.go; nil: none), and the terms in a
	// row whose job hung on this host (Config.Zombies, or its own).
	notify     *notifySocket
	zombies    *ZombieHold
	zombieTerm bool // the last term's job hung
}

// New validates cfg and returns a supervisor.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	// One line per record, durations as KEY_s seconds, whoever logs.
	s.log = logline.Wrap(s.log)
	if s.clock == nil {
		s.clock = RealClock{}
	}
	s.zombies = cfg.Zombies
	if s.zombies == nil {
		s.zombies = &ZombieHold{}
	}
	s.preemptWait = cfg.Control.PreemptAfter
	if s.preemptWait <= 0 {
		s.preemptWait = DefaultPreemptAfter
	}
	s.box = cfg.Contain
	if s.box == nil {
		b, err := contain.Open(contain.Group, contain.Options{Reaped: Reaped, HoldReaps: HoldReaps})
		if err != nil {
			return nil, err
		}
		s.box = b
	}
	return s, nil
}

// Run campaigns, leads and stops until leaderrun should exit, and returns
// its exit code. Cancelling ctx is a graceful stop: the child gets the stop
// signal, then SIGKILL after the kill grace, and leadership is released once
// the job is gone.
func (s *Supervisor) Run(ctx context.Context) int {
	noGuard := retry.Backoff{Min: time.Second, Max: MaxRestartDelay}
	// What dead leaderruns of this key left on this host dies now, whether
	// or not this one wins (DESIGN §1.9); each term sweeps again.
	if err := s.sweepLeftovers(); err != nil {
		s.log.Warn("a leftover job of this key is still alive; it is swept again before any child starts", "error", err)
	}
	notify, err := s.openNotify()
	if err != nil {
		s.log.Error("cannot start", "error", err)
		return ExitInternal
	}
	s.notify = notify
	defer s.notify.close()
	wctx, stopWatching := context.WithCancel(ctx)
	s.ctl = s.startControl(wctx)
	if sh := s.cfg.Control.Shared; sh != nil {
		s.health = sh.w
	} else {
		s.health = s.startHealth(wctx)
	}
	defer func() {
		stopWatching()
		if s.cfg.Control.Shared == nil {
			s.health.wait() // a check still running is killed first
		}
	}()
	for {
		lease, deadline, code, ok := s.campaign(ctx)
		if !ok {
			return code
		}
		began := s.clock.Now()
		s.zombieTerm = false
		code, lost, retry, handover := s.lead(ctx, lease, deadline)
		if !s.zombieTerm {
			s.zombies.reset()
		}
		s.afterPreemptedTerm(s.clock.Now().Sub(began))
		if ctx.Err() != nil {
			if retry {
				return interruptedCode(ctx)
			}
			return code
		}
		if retry {
			wait := noGuard.Next()
			s.log.Warn("campaigning again once a guard can start", "retry_in", wait)
			if !s.sleep(ctx, wait) {
				return interruptedCode(ctx)
			}
			if s.cfg.Rerace {
				return ExitRerace
			}
			continue
		}
		if handover {
			// Stopped and released for the operator: wait again (§1.16).
			s.steppedDown = lease.Epoch()
			if s.pausedOut {
				// Said as what happens next: nothing, until a resume.
				s.log.Info("paused: not campaigning until resumed", "epoch", lease.Epoch())
			} else {
				s.log.Info("waiting again after stepping down", "epoch", lease.Epoch())
			}
			if s.cfg.Rerace {
				return ExitRerace
			}
			continue
		}
		if lost && s.cfg.OnLost == LostRejoin {
			s.log.Info("rejoining the campaign after losing leadership")
			if s.cfg.Rerace {
				return ExitRerace
			}
			continue
		}
		return code
	}
}

// sleep waits d on the supervisor's clock, or until ctx ends; it reports
// whether the whole wait passed.
func (s *Supervisor) sleep(ctx context.Context, d time.Duration) bool {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// campaign waits for leadership, retrying backend failures with backoff, and
// confirms it with one renewal whose send time starts the first deadline.
func (s *Supervisor) campaign(ctx context.Context) (lease locker.Lease, deadline time.Time, code int, ok bool) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if s.cfg.AcquireTimeout > 0 {
		actx, cancel = clock.WithTimeout(ctx, s.clock, s.cfg.AcquireTimeout)
	}
	defer cancel()

	backoff := retry.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	var failed error // the last attempt that failed for a reason of its own
	holder := s.watchHolder(actx)
	defer holder.stop()
	for {
		if s.singleAttempt() {
			// One attempt waits for nothing, the first health check aside.
			if why := s.awaitFirstCheck(actx); why != "" {
				s.log.Info("not acquired", "reason", why)
				return nil, time.Time{}, ExitNotHeld, false
			}
		}
		call(s.cfg.Events.Campaigning)
		// With Rerace the slot race held back already, and the lease is
		// won: waiting here would sit on it. The read after the win
		// (refuseWon) decides.
		if !s.cfg.Rerace && !s.awaitFree(actx) {
			if ctx.Err() != nil {
				s.log.Info("stopped while waiting for leadership")
				return nil, time.Time{}, interruptedCode(ctx), false
			}
			holder.stop()
			if why := s.heldBackNow(); why != "" {
				// Held back is no outage: the exit line says why, and the
				// code is --no-wait's, which a unit restarts (DESIGN §4).
				s.log.Warn("not acquired within --acquire-timeout: held back", "timeout", s.cfg.AcquireTimeout, "reason", why)
				return nil, time.Time{}, ExitNotHeld, false
			}
			return nil, time.Time{}, s.timedOut(ctx, failed, holder), false
		}
		s.log.Debug("campaigning")
		lease, err := s.acquire(actx)
		if errors.Is(err, errHeldBack) {
			if s.cfg.Rerace && ctx.Err() == nil {
				return nil, time.Time{}, ExitRerace, false
			}
			continue
		}
		if err == nil {
			s.log.Debug("won the key; confirming", "epoch", lease.Epoch())
			// The term's sweep needs no lease: it runs beside the
			// confirm (DESIGN §1.9), its result waited for before
			// the first child.
			sw := s.startSweep()
			// So does the guard's start: armed with the lease alone, it
			// releases it if this process dies, and knows no job yet.
			eg := startEarlyGuard(s.cfg.Guard, lease, s.log)
			deadline, err = s.confirm(lease)
			if err == nil {
				if why := s.refuseWon(lease); why != "" {
					s.drop(sw)
					eg.drop()
					s.log.Info("giving the key back before any child starts", "epoch", lease.Epoch(), "reason", why)
					s.release(lease, false)
					unread := strings.HasPrefix(why, errControlUnread)
					if s.singleAttempt() {
						if unread {
							return nil, time.Time{}, ExitInternal, false
						}
						s.log.Warn("not acquired: held back", "reason", why)
						return nil, time.Time{}, ExitNotHeld, false
					}
					if unread {
						s.sleep(actx, backoff.Next()) // an end of actx: awaitFree says
					}
					if s.cfg.Rerace {
						if ctx.Err() != nil {
							return nil, time.Time{}, interruptedCode(ctx), false
						}
						return nil, time.Time{}, ExitRerace, false
					}
					continue
				}
				holder.stop()
				s.log.Debug("acquired", "epoch", lease.Epoch(), "lease_left", deadline.Sub(s.clock.Now()))
				if f := s.cfg.Events.Acquired; f != nil {
					f(lease.Epoch(), deadline)
				}
				s.early, s.earlyGuard = sw, eg
				return lease, deadline, 0, true
			}
			s.drop(sw)
			eg.drop()
			s.release(lease, false)
		}
		switch {
		case ctx.Err() != nil:
			s.log.Info("stopped while waiting for leadership")
			return nil, time.Time{}, interruptedCode(ctx), false
		case errors.Is(err, locker.ErrHeld):
			s.log.Info("not acquired", "reason", err)
			return nil, time.Time{}, ExitNotHeld, false
		case locker.Unreached(err):
			s.log.Error("backend could not be reached", "error", err)
			return nil, time.Time{}, ExitInternal, false
		case errors.Is(err, locker.ErrRefused):
			s.log.Error("backend refused", "error", err)
			return nil, time.Time{}, ExitInternal, false
		case actx.Err() != nil:
			holder.stop()
			return nil, time.Time{}, s.timedOut(ctx, failed, holder), false
		}
		wait := backoff.Next()
		// The same failure again is logged at INFO, a new one warns:
		// cron would mail a line every retry of a long --acquire-timeout.
		retry.SayFailure(s.log, failed, err, "campaign failed, retrying", "error", err, "retry_in", wait)
		failed = err
		t := s.clock.NewTimer(wait)
		select {
		case <-actx.Done():
		case <-t.C():
		}
		t.Stop()
		if s.cfg.Rerace && actx.Err() == nil {
			// The next attempt is a race of every slot.
			return nil, time.Time{}, ExitRerace, false
		}
	}
}

// holderReadTimeout bounds the read that asks, once --acquire-timeout
// passed, whether the backend answers at all.
const holderReadTimeout = 2 * time.Second

// holderReread is how often a waiting campaign reads the holder again
// (holderWatch).
const holderReread = time.Minute

// timedOut is the outcome of an --acquire-timeout that passed. "Held
// elsewhere" (124, or --conflict-exit) is said only when a holder was seen:
// it is asked once more who leads, and a holder read then or by the
// campaign's watch (holderWatch) is a conflict. Without one the wait was an
// outage (125), logged at WARN, which --quiet shows, with the backend's
// address and the last error the campaign met (DESIGN §4).
func (s *Supervisor) timedOut(ctx context.Context, failed error, w *holderWatch) int {
	rctx, cancel := context.WithTimeout(ctx, holderReadTimeout)
	defer cancel()
	h, err := s.cfg.Locker.Leader(rctx)
	last, seen, watchErr := w.result()
	if err != nil && seen {
		h = last
	}
	if err == nil || seen {
		s.log.Info("not acquired within --acquire-timeout", append([]any{"timeout", s.cfg.AcquireTimeout}, holderFields(h)...)...)
		return ExitNotHeld
	}
	msg := "not acquired within --acquire-timeout: the backend could not be reached"
	if failed == nil && errors.Is(err, locker.ErrNoLeader) {
		msg = "not acquired within --acquire-timeout, and no holder was seen"
	}
	for _, e := range []error{watchErr, err} {
		if failed == nil {
			failed = e
		}
	}
	args := []any{"timeout", s.cfg.AcquireTimeout, "error", failed}
	if s.cfg.Target != "" {
		args = append([]any{"address", s.cfg.Target}, args...)
	}
	s.log.Warn(msg, args...)
	return ExitInternal
}

// confirm makes the first renewal of a new lease. Its send time, not the
// moment Acquire returned, starts the deadline (DESIGN §1.2). A lease whose
// Acquire ended with such a renewal (locker.Confirmed) needs no other.
func (s *Supervisor) confirm(lease locker.Lease) (time.Time, error) {
	if c, ok := lease.(locker.Confirmed); ok {
		// The acquire's own renewal, timed on the same clock as ours
		// only when ours is the real one.
		if _, real := s.clock.(RealClock); real {
			if sent, granted, ok := c.Confirmation(); ok {
				return NewDeadline(sent, s.cfg.TTL, granted), nil
			}
		}
	}
	sent := s.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.renewTimeout())
	defer cancel()
	granted, err := lease.Renew(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("confirm new lease: %w", err)
	}
	return NewDeadline(sent, s.cfg.TTL, granted), nil
}

// release gives leadership back with its own timeout. Only called once the
// job is gone (DESIGN §1.4). A routine release (the child succeeded and
// leaderrun exits) is said at DEBUG, any other at INFO.
func (s *Supervisor) release(lease locker.Lease, routine bool) {
	s.log.Debug("releasing", "epoch", lease.Epoch())
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		s.log.Warn("release failed; the lease will expire on its own", "error", err)
		return
	}
	level := hclog.Info
	if routine {
		level = hclog.Debug
	}
	s.log.Log(level, "released", "epoch", lease.Epoch())
}

// releaseQuietly stops the lease's own goroutines after the guard released
// it; the backend's answer (already gone) is not news.
func (s *Supervisor) releaseQuietly(lease locker.Lease) {
	if lf, ok := lease.(lockFile); ok {
		// The lock may be another holder's by now: its record must not be
		// cleared. Only our descriptor goes.
		_ = lf.LockFile().Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		s.log.Debug("release after the guard's", "error", err)
	}
}

// stopCause is the signal that asked leaderrun to stop, if one did.
func stopCause(ctx context.Context) (syscall.Signal, bool) {
	var sc SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc.Signal, true
	}
	return 0, false
}

// interruptedCode is the exit code when leaderrun was told to stop while
// it ran no child: 128+N for signal N, as a shell would report.
func interruptedCode(ctx context.Context) int {
	var sc SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return exitcode.SignalBase + int(sc.Signal)
	}
	return ExitInternal
}

// childEnv completes the child's environment with this leadership's epoch
// and the start's run id.
func (s *Supervisor) childEnv(epoch uint64) []string {
	env := append([]string(nil), s.cfg.Command.Env...)
	id := s.cfg.RunID
	if id == "" {
		id = NewRunID()
	}
	return append(env, "LEADER_EPOCH="+strconv.FormatUint(epoch, 10), "LEADER_RUN_ID="+id)
}

// NewRunID returns a fresh LEADER_RUN_ID: 128 random bits in hex, unique
// to one start of the child on any host, so a resource can take it as an
// idempotency key for what that run did.
func NewRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (crypto/rand)
	return hex.EncodeToString(b[:])
}

func call(f func()) {
	if f != nil {
		f()
	}
}
