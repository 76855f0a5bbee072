//go:build linux

package supervise

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
)

// groupPollInterval is how often a stopping supervisor looks whether the
// child's process group is gone. It observes; it decides no deadline.
const groupPollInterval = 10 * time.Millisecond

// HeartbeatInterval is the longest the leader's event loop goes without a
// turn (and an Events.Tick) while nothing happens; observers use the ticks
// to tell a live loop from a stuck one. Kept coarse so a leader idles cheaply.
const HeartbeatInterval = 250 * time.Millisecond

// renewal is the outcome of one renewal round trip.
type renewal struct {
	sent    time.Time
	granted time.Duration
	err     error
}

// leadership is the state of one term as leader, owned by lead's goroutine.
type leadership struct {
	lease    locker.Lease
	timeline StopTimeline // the lease's timeline while not stopping

	child     *Child // running, its exit not yet handled
	group     *Child // the last child started: its group may outlive it
	startedAt time.Time
	lastCode  int
	restarts  retry.Backoff
	restartAt Timer // armed while waiting to start the child again

	stopping  bool // the stop sequence began; nothing un-stops it (§1.3)
	lost      bool
	code      int
	childCode bool  // the exit code is the child's, once it exits
	killAt    Timer // armed while stopping, until SIGKILL is sent

	guard *guardProc // nil without a guard

	started   bool // a child was started this term
	succeeded bool // a child exited 0 on its own this term
}

// lead runs the child while the lease lasts and returns the exit code and
// whether leadership was lost.
func (s *Supervisor) lead(ctx context.Context, lease locker.Lease, deadline time.Time) (code int, lost bool) {
	l := &leadership{
		lease:    lease,
		timeline: StopTimeline{Deadline: deadline, SafetyMargin: s.cfg.SafetyMargin, KillGrace: s.cfg.KillGrace},
		restarts: retry.Backoff{Min: s.cfg.RestartDelay, Max: MaxRestartDelay},
	}
	renewCtx, stopRenewing := context.WithCancel(context.Background())
	renewals := make(chan renewal)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		s.renewLoop(renewCtx, lease, renewals)
	}()
	defer func() {
		stopRenewing()
		<-renewDone
	}()

	termAt := s.at(l.timeline.TermAt())
	defer func() { termAt.Stop() }()
	poll := time.NewTicker(HeartbeatInterval)
	defer poll.Stop()
	polling := false

	if s.skipTerm(ctx, l) {
		// Ended before any child: the loop below releases.
	} else if err := s.startChild(l); err != nil {
		var se *StartError
		code := ExitInternal
		if errors.As(err, &se) {
			code = se.Code
		}
		s.log.Error("cannot start the command", "error", err)
		s.finish(l, "command could not be started", false, code)
	}

	// Closed channels that were handled once are set to nil, so the select
	// does not spin on them.
	ctxDone, lostC := ctx.Done(), lease.Lost()
	for {
		call(s.cfg.Events.Tick)
		if s.cfg.Freeze != nil {
			s.cfg.Freeze()
		}
		s.overdue(l)
		if l.stopping && !polling {
			poll.Reset(groupPollInterval)
			polling = true
		}
		if l.stopping && (l.group == nil || !l.group.GroupAlive()) {
			if l.child != nil {
				// Gone, but its exit not yet handled: report it first.
				s.onChildExit(l)
			}
			stopRenewing()
			<-renewDone
			s.afterRun(l)
			s.release(lease)
			if l.guard != nil {
				// After the release: a leaderrun dying in between still has its
				// lease released by the guard.
				l.guard.stop()
			}
			if f := s.cfg.Events.Released; f != nil {
				f()
			}
			return l.code, l.lost
		}
		select {
		case r := <-renewals:
			s.onRenewal(l, r, &termAt)
		case <-termAt.C():
			if !l.stopping {
				s.finish(l, "lease deadline reached without a successful renewal", true, ExitLost)
			}
		case <-timerC(l.killAt):
			l.killAt = nil
			s.signal(l, syscall.SIGKILL)
		case <-lostC:
			lostC = nil
			if !l.stopping {
				s.finish(l, "leadership lost: "+lease.LostReason(), true, ExitLost)
			}
		case <-childDone(l.child):
			s.onChildExit(l)
		case <-timerC(l.restartAt):
			l.restartAt = nil
			s.restart(l)
		case <-ctxDone:
			ctxDone = nil
			if !s.overdue(l) {
				s.finish(l, "leaderrun was asked to stop", false, l.lastCode)
			}
		case sig := <-s.cfg.Forward:
			if sn, ok := sig.(syscall.Signal); ok {
				s.signal(l, sn)
			}
		case <-poll.C:
			// A heartbeat; while stopping, re-check the group at the top.
		}
	}
}

// renewRetryDelay is the pause after a failed renewal before the next
// try. A timed-out try is retried at once: its time is already spent.
const renewRetryDelay = 250 * time.Millisecond

// renewTimeout bounds one renewal attempt (DESIGN §1.8): a tenth of the TTL,
// at least 500ms, at most the renew interval. It is short on purpose: a
// request stuck on a silent server or connection must leave room, before
// the stop point, for retries that a client can send elsewhere.
func (s *Supervisor) renewTimeout() time.Duration {
	return min(s.cfg.RenewInterval, max(s.cfg.TTL/10, 500*time.Millisecond))
}

// renewLoop makes one renewal per interval, retrying failures quickly, each
// with its own timeout, and reports every outcome with the time its request
// was sent.
func (s *Supervisor) renewLoop(ctx context.Context, lease locker.Lease, out chan<- renewal) {
	wait := s.cfg.RenewInterval
	for {
		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		sent := s.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, s.renewTimeout())
		granted, err := lease.Renew(rctx)
		timedOut := rctx.Err() != nil
		cancel()
		select {
		case out <- renewal{sent: sent, granted: granted, err: err}:
		case <-ctx.Done():
			return
		}
		switch {
		case err == nil:
			wait = s.cfg.RenewInterval
		case timedOut:
			wait = 0
		default:
			wait = min(s.cfg.RenewInterval, renewRetryDelay)
		}
	}
}

// onRenewal moves the deadline after a success. A result that arrives once
// the stop sequence began changes nothing (§1.3).
func (s *Supervisor) onRenewal(l *leadership, r renewal, termAt *Timer) {
	if l.stopping {
		return
	}
	if r.err != nil {
		if errors.Is(r.err, locker.ErrLost) {
			s.finish(l, "leadership lost: "+r.err.Error(), true, ExitLost)
			return
		}
		s.log.Warn("renew failed", "error", r.err, "deadline_in", l.timeline.Deadline.Sub(s.clock.Now()).Round(time.Millisecond))
		if f := s.cfg.Events.RenewFailed; f != nil {
			f(r.err)
		}
		return
	}
	deadline := NewDeadline(r.sent, s.cfg.TTL, r.granted)
	if deadline.Before(l.timeline.Deadline) {
		return // renewals are sequential; an older send never shortens it
	}
	if s.overdue(l) {
		return // too late: the stop was due before this answer arrived
	}
	l.timeline.Deadline = deadline
	(*termAt).Stop()
	*termAt = s.at(l.timeline.TermAt())
	if l.guard != nil {
		l.guard.extend(l.timeline.KillAt(), s.clock.Now())
	}
	s.log.Debug("renewed", "deadline_in", deadline.Sub(s.clock.Now()).Round(time.Millisecond))
	if f := s.cfg.Events.Renewed; f != nil {
		f(deadline)
	}
}

// onChildExit handles the child's own exit: restart it, or end this term.
func (s *Supervisor) onChildExit(l *leadership) {
	c := l.child
	l.lastCode = c.ExitCode()
	l.child = nil
	if !l.stopping && l.lastCode == 0 {
		l.succeeded = true
	}
	s.log.Info("child exited", "pid", c.Pid(), "status", c.Describe())
	if f := s.cfg.Events.ChildExited; f != nil {
		f(l.lastCode)
	}
	if s.overdue(l) {
		if l.childCode {
			l.code = l.lastCode
		}
		return
	}
	restart := s.cfg.Restart == RestartAlways || (s.cfg.Restart == RestartOnFailure && l.lastCode != 0)
	if !restart {
		// Leftovers in the group are stopped as the child would have been.
		s.finish(l, "child exited", false, l.lastCode)
		return
	}
	if s.clock.Now().Sub(l.startedAt) >= MaxRestartDelay {
		// A run that lasted is not part of a crash loop: start over at
		// the first delay.
		l.restarts.Reset()
	}
	wait := l.restarts.Next()
	s.log.Info("restarting the child", "in", wait)
	l.restartAt = s.clock.NewTimer(wait)
}

// restart starts the child again once nothing of its last run is left, so
// two runs never overlap.
func (s *Supervisor) restart(l *leadership) {
	if s.overdue(l) {
		return
	}
	if l.group != nil && l.group.GroupAlive() {
		s.signal(l, syscall.SIGKILL)
		l.restartAt = s.clock.NewTimer(groupPollInterval)
		return
	}
	if err := s.startChild(l); err != nil {
		s.log.Error("cannot restart the command", "error", err)
		s.finish(l, "command could not be restarted", false, ExitInternal)
	}
}

// overdue starts the stop sequence if the lease's stop time has passed,
// and reports whether the leadership is stopping. Every event handler asks
// it first: after a freeze, the deadline rules whatever event the select
// happened to pick, a child's exit or a late renewal included (§1.3).
func (s *Supervisor) overdue(l *leadership) bool {
	if !l.stopping && !s.clock.Now().Before(l.timeline.TermAt()) {
		s.finish(l, "lease deadline reached without a successful renewal", true, ExitLost)
	}
	return l.stopping
}

// startChild starts the command with this term's epoch.
func (s *Supervisor) startChild(l *leadership) error {
	cmd := s.cfg.Command
	cmd.Env = s.childEnv(l.lease.Epoch())
	s.ensureGuard(l)
	c, err := StartChild(cmd)
	if err != nil {
		return err
	}
	l.child, l.group, l.startedAt = c, c, s.clock.Now()
	l.started = true
	if l.guard != nil {
		l.guard.watch(c.Pid(), l.timeline.KillAt(), s.clock.Now())
	}
	s.log.Info("child started", "pid", c.Pid(), "epoch", l.lease.Epoch())
	if f := s.cfg.Events.ChildStarted; f != nil {
		f(c.Pid())
	}
	return nil
}

// finish begins the stop sequence: stop signal to the group now, SIGKILL
// after the kill grace but never after the lease's kill point (§1.3).
func (s *Supervisor) finish(l *leadership, reason string, lost bool, code int) {
	l.stopping, l.lost, l.code = true, lost, code
	l.childCode = !lost && l.child != nil
	if l.restartAt != nil {
		l.restartAt.Stop()
		l.restartAt = nil
	}
	running := l.group != nil && l.group.GroupAlive()
	msg := "leadership ending"
	if running {
		msg = "stopping child"
	}
	if lost {
		s.log.Warn(msg, "reason", reason)
	} else {
		s.log.Info(msg, "reason", reason)
	}
	if f := s.cfg.Events.Stopping; f != nil {
		f(reason, lost)
	}
	if !running {
		return
	}
	now := s.clock.Now()
	stop := l.timeline.StartedAt(now)
	s.signal(l, s.cfg.StopSignal)
	l.killAt = s.at(stop.KillAt())
}

// signal sends sig to the child's process group.
func (s *Supervisor) signal(l *leadership, sig syscall.Signal) {
	if l.group == nil {
		return
	}
	if !l.group.GroupAlive() {
		// Once empty, the group id may be reused by strangers: forget it.
		l.group = nil
		return
	}
	if err := l.group.Signal(sig); err != nil {
		s.log.Error("signal child group", "signal", signals.Name(sig), "error", err)
		return
	}
	s.log.Debug("signalled child group", "signal", signals.Name(sig), "pgid", l.group.Pid())
	if f := s.cfg.Events.ChildSignalled; f != nil {
		f(sig)
	}
}

// at returns a timer firing at t on the supervisor's clock.
func (s *Supervisor) at(t time.Time) Timer {
	return s.clock.NewTimer(t.Sub(s.clock.Now()))
}

// timerC is t's channel, or nil (never ready) when t is not armed.
func timerC(t Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// childDone is the running child's exit channel, or nil without one.
func childDone(c *Child) <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.Done()
}

// ensureGuard starts the term's guard before its first child, so no child
// runs unguarded. Without a guard the supervisor's own timeline and
// PDEATHSIG still stand, so a failed start is logged, not fatal.
func (s *Supervisor) ensureGuard(l *leadership) {
	if s.cfg.Guard == nil || l.guard != nil {
		return
	}
	g, err := startGuard(s.cfg.Guard, l.lease.Handle(), s.log.Named("guard"))
	if err != nil {
		s.log.Error("cannot start the dead-man guard; running without it", "error", err)
		return
	}
	l.guard = g
}
