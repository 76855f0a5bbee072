//go:build linux

package supervise

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/supervise/jobnotify"
)

// jobPollInterval is how often a stopping supervisor looks whether the job
// is gone. It observes; it decides no deadline.
const jobPollInterval = 10 * time.Millisecond

// HeartbeatInterval is the longest the leader's event loop goes without a
// turn (and an Events.Tick) while nothing happens, when someone observes
// the ticks (Events.Tick set): /healthz and the systemd watchdog tell a live
// loop from a stuck one by them. Without an observer the loop sleeps until
// something happens.
const HeartbeatInterval = 250 * time.Millisecond

// renewal is the outcome of one renewal round trip.
type renewal struct {
	sent    time.Time
	granted time.Duration
	err     error
}

// leadership is the state of one term as leader, owned by lead's goroutine.
type leadership struct {
	// The lease.
	lease    locker.Lease
	timeline StopTimeline // the lease's timeline while not stopping

	// The child and its restarts.
	child     *Child       // running, its exit not yet handled
	job       *contain.Job // the last job started, until seen gone
	startedAt time.Time
	lastCode  int
	restarts  retry.Backoff
	restartAt Timer // armed while waiting to start the child again

	// The stop sequence and how the term ends.
	stopping   bool // the stop sequence began; nothing un-stops it (§1.3)
	lost       bool
	retry      bool // ended for want of a guard: campaign again
	handover   bool // ended for the operator (§1.16): campaign again
	code       int
	childCode  bool           // the exit code is the child's, once it exits
	stopSignal syscall.Signal // the first signal of the stop sequence
	killAt     Timer          // armed while stopping, until SIGKILL is sent
	killed     bool           // SIGKILL was sent: sweep again while the job lives

	guard guardTerm // the term's dead-man guard and what it was told (§1.9)

	// What the running job said over the notify socket, judged by the
	// term's rules (notify.go); nil when no child runs or it is stopping.
	said       *jobnotify.State
	jobCheckAt Timer // armed at the judgement's next deadline

	// What the term did (TermHooks.AfterRun, the exit code of a stop).
	started   bool // a child was started this term
	succeeded bool // a child exited 0 on its own this term

	// The term's run history (nil: not written) and what it needs to say
	// how the term ended.
	history   *historyWriter
	ctx       context.Context
	endReason string // the first reason finish was given
}

// lead runs the child while the lease lasts and returns the exit code,
// whether leadership was lost, and whether to campaign again because no
// guard could watch the job.
func (s *Supervisor) lead(ctx context.Context, lease locker.Lease, deadline time.Time) (code int, lost, again, handover bool) {
	l := &leadership{
		lease:      lease,
		timeline:   s.cfg.Timeline(deadline),
		restarts:   retry.Backoff{Min: s.cfg.RestartDelay, Max: MaxRestartDelay},
		stopSignal: s.cfg.StopSignal,
		guard:      guardTerm{now: s.clock.Now},
		history:    s.newHistory(lease),
		ctx:        ctx,
	}
	renewCtx, stopRenewing := context.WithCancel(context.Background())
	renewals := make(chan renewal)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		s.renewLoop(renewCtx, lease, deadline, renewals)
	}()
	defer func() {
		stopRenewing()
		<-renewDone
	}()

	termAt := s.at(l.timeline.TermAt())
	defer func() { termAt.Stop() }()
	// The ticker runs only when someone watches the heartbeat, or while
	// stopping, to see the job gone.
	var poll Ticker
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	if s.cfg.Events.Tick != nil {
		poll = s.clock.NewTicker(HeartbeatInterval)
	}
	polling := false

	// Signals that arrived while we were not leading are not for this job
	// (DESIGN §1.11).
	s.dropForwarded()
	// Closed channels that were handled once are set to nil, so the select
	// does not spin on them.
	ctxDone, lostC := ctx.Done(), lease.Lost()
	// Leftovers of this key are swept beside the confirm and the loop; the
	// first child waits for the sweep (DESIGN §1.9).
	sw := s.early
	s.early = nil
	if sw == nil {
		sw = s.startSweep()
	}
	sweepC := sw.c
	defer sw.wait()
	// The guard started beside the confirm (or starts now, beside the
	// sweep): armed with the lease, with no job yet. startChild starts it
	// if this failed, and handles the failure.
	eg := s.earlyGuard
	s.earlyGuard = nil
	err := l.guard.adopt(eg, s.log)
	if err == nil {
		err = s.ensureGuard(l)
	}
	if err != nil {
		s.log.Debug("no guard yet; trying again before the child", "error", err)
	}

	for {
		call(s.cfg.Events.Tick)
		if freezeHook != nil {
			freezeHook()
		}
		s.overdue(l)
		ctlC, healthC := s.changes()
		if !l.stopping {
			if why, paused := s.askedToGo(l); why != "" {
				// As on SIGTERM, then campaign again (§1.16).
				l.handover = true
				s.pausedOut = paused
				call(s.cfg.Events.HandingOver)
				s.finish(l, why, false, l.lastCode)
			}
		}
		if l.stopping && !polling {
			if poll == nil {
				poll = s.clock.NewTicker(jobPollInterval)
			} else {
				poll.Reset(jobPollInterval)
			}
			polling = true
		}
		if l.stopping && !s.jobAlive(l) {
			if l.child != nil {
				// Gone, but its exit not yet handled: report it first.
				s.onChildExit(l)
			}
			stopRenewing()
			<-renewDone
			s.afterRun(l)
			switch {
			case l.guard.releasedLease():
				s.log.Info("leadership already released by the guard", "epoch", lease.Epoch())
				// Still stop the lease's own goroutines; the backend says no.
				s.releaseQuietly(lease)
			case l.guard.didFire():
				// The guard releases it once it sees the job gone, maybe
				// after a standby took the lock: leave the record alone.
				s.log.Info("leadership is released by the guard", "epoch", lease.Epoch())
				s.releaseQuietly(lease)
			default:
				s.release(lease, routineEnd(l))
			}
			// After the release: a leaderrun dying in between still has its
			// lease released by the guard.
			l.guard.stop()
			if f := s.cfg.Events.Released; f != nil {
				f()
			}
			// Off the renewal path, after the release (DESIGN §5).
			l.history.ended(l)
			return l.code, l.lost, l.retry, l.handover
		}
		if l.stopping && l.killed {
			// Past the kill point and still alive: a job forking faster than
			// one sweep kills is swept again on every turn (DESIGN §1.4).
			s.sweep(l)
		}
		select {
		case r := <-sweepC:
			sweepC = nil
			s.log.Debug("leftovers swept", "found", len(r.found))
			if s.swept(l, r) && !s.skipTerm(ctx, l) && s.mayStart(ctx, l) {
				s.startOrFinish(l, "command could not be started")
			}
		case r := <-renewals:
			s.onRenewal(l, r, &termAt)
		case <-termAt.C():
			s.overdue(l) // the guard first: it may have fired already
		case <-timerC(l.killAt):
			l.killAt = nil
			s.log.Warn("the job did not stop within --kill-grace; killing it", "stop_signal", signals.Name(l.stopSignal))
			s.kill(l)
		case <-lostC:
			lostC = nil
			if !l.stopping {
				s.finish(l, "leadership lost: "+lease.LostReason(), true, ExitLost)
			}
		case <-childDone(l.child):
			s.onChildExit(l)
		case sig := <-childStops(l.child):
			s.onChildStopped(l, sig)
		case <-timerC(l.restartAt):
			l.restartAt = nil
			s.restart(ctx, l)
		case <-ctxDone:
			ctxDone = nil
			if !s.overdue(l) {
				if sig, ok := stopCause(ctx); ok && sig == syscall.SIGINT {
					// Ctrl-C reaches the job's own INT handler (DESIGN §3).
					l.stopSignal = syscall.SIGINT
				}
				code := l.lastCode
				if !l.started {
					// Stopped before the term's first child (its sweep
					// still running): as a shell reports a signal.
					code = interruptedCode(ctx)
				}
				s.finish(l, stopRequested, false, code)
			}
		case sig := <-s.cfg.Forward:
			s.forward(l, sig)
		case <-l.guard.exitedC():
			s.onGuardExit(l)
		case <-l.guard.firedC():
			s.checkGuard(l)
		case <-l.guard.releasedC():
			l.guard.noteReleased()
			s.checkGuard(l) // a guard that released has fired
		case m := <-s.notify.messages():
			s.jobSaid(l, m)
		case <-timerC(l.jobCheckAt):
			l.jobCheckAt = nil
			s.armJobCheck(l)
		case <-tickerC(poll):
			// A heartbeat; while stopping, re-check the job at the top.
		case <-ctlC:
			// The control record changed: asked to go? At the top.
		case <-healthC:
		}
	}
}

// freezeHook, when set, is called at every turn of the leader's event loop:
// a test hook that simulates a supervisor that hangs. Only test builds set
// it (freeze_testhook.go).
var freezeHook func()

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
// was sent. Successful renewals are spaced by the interval from SEND to
// SEND: counting from the response would let the round trip stretch every
// interval, and a slow backend would lose a lease it renews without fail.
func (s *Supervisor) renewLoop(ctx context.Context, lease locker.Lease, deadline time.Time, out chan<- renewal) {
	// The confirm's deadline may be short too.
	next := s.nextRenewal(s.clock.Now(), deadline)
	for {
		t := s.clock.NewTimer(next.Sub(s.clock.Now()))
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
			next = s.nextRenewal(sent, NewDeadline(sent, s.cfg.TTL, granted))
		case timedOut:
			next = s.clock.Now()
		default:
			next = s.clock.Now().Add(min(s.cfg.RenewInterval, renewRetryDelay))
		}
	}
}

// nextRenewal is when to send the renewal after one sent at sent gave the
// deadline deadline: the interval after it, or sooner when the grant was too
// short for that (ZooKeeper counts it from an earlier request when the
// read before it came late, relay.go): the stop signal, the kill grace and
// the safety margin before the deadline, must not come before the next
// renewal has had its timeout to answer. Never sooner than a short pause
// (or the interval, when that is shorter), so a backend that keeps granting
// almost nothing is not asked in a loop; the deadline stays send + granted
// either way (§1.2), and the grant counted here is the one the deadline
// counts (NewDeadline: a grant of 0 or less reported nothing).
func (s *Supervisor) nextRenewal(sent, deadline time.Time) time.Time {
	next := sent.Add(s.cfg.RenewInterval)
	latest := s.cfg.Timeline(deadline).RenewBy(s.renewTimeout())
	if latest.Before(next) {
		next = latest
		if floor := s.clock.Now().Add(min(shortGrantPause, s.cfg.RenewInterval)); next.Before(floor) {
			next = floor
		}
	}
	return next
}

// shortGrantPause is the least time between renewals after a short grant.
const shortGrantPause = 50 * time.Millisecond

// onRenewal moves the deadline after a success. A result that arrives once
// the stop sequence began changes nothing (§1.3), nor one that arrives
// after the guard fired: overdue reads the guard's replies first.
func (s *Supervisor) onRenewal(l *leadership, r renewal, termAt *Timer) {
	if s.overdue(l) {
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
	// Renewals are sequential, so this answer is to the latest send: its
	// deadline rules, even when a shorter granted TTL makes it earlier than
	// the last one (§1.2, §1.6).
	l.timeline.Deadline = NewDeadline(r.sent, s.cfg.TTL, r.granted)
	// Before anything else: an earlier kill point must reach the guard
	// even when it ends the term here (guardTerm.extend).
	l.guard.extend(l.timeline.KillAt())
	if s.overdue(l) {
		return
	}
	(*termAt).Stop()
	*termAt = s.at(l.timeline.TermAt())
	s.log.Debug("renewed", "deadline_in", l.timeline.Deadline.Sub(s.clock.Now()).Round(time.Millisecond))
	if f := s.cfg.Events.Renewed; f != nil {
		f(l.timeline.Deadline)
	}
}

// onChildExit handles the child's own exit: restart it, or end this term.
func (s *Supervisor) onChildExit(l *leadership) {
	c := l.child
	l.lastCode = c.ExitCode()
	l.child = nil
	// A job's run ends with its child: what is left of it is not heard.
	l.said = nil
	if l.jobCheckAt != nil {
		l.jobCheckAt.Stop()
		l.jobCheckAt = nil
	}
	s.notify.watch(nil)
	if !l.stopping && l.lastCode == 0 {
		l.succeeded = true
	}
	s.logChildExit(l, c)
	if f := s.cfg.Events.ChildExited; f != nil {
		f(l.lastCode)
	}
	if s.overdue(l) {
		if l.childCode {
			l.code = l.lastCode
		}
		return
	}
	if s.interruptedAtTerminal(l, c) {
		return
	}
	restart := s.cfg.Restart == RestartAlways || (s.cfg.Restart == RestartOnFailure && l.lastCode != 0)
	if !restart {
		// Leftovers of the job are stopped as the child would have been.
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
func (s *Supervisor) restart(ctx context.Context, l *leadership) {
	if !s.mayStart(ctx, l) {
		return
	}
	if s.jobAlive(l) {
		s.kill(l)
		l.restartAt = s.clock.NewTimer(jobPollInterval)
		return
	}
	s.startOrFinish(l, "command could not be restarted")
}

// mayStart reports whether a child may start now: not once a stop was
// requested, a loss reported or the guard fired, whatever order the select
// saw them in (DESIGN §1.9, §1.11). It starts the stop sequence for them.
func (s *Supervisor) mayStart(ctx context.Context, l *leadership) bool {
	if s.overdue(l) {
		return false
	}
	select {
	case <-l.lease.Lost():
		s.finish(l, "leadership lost: "+l.lease.LostReason(), true, ExitLost)
		return false
	default:
	}
	if ctx.Err() != nil {
		s.finish(l, stopRequested, false, interruptedCode(ctx))
		return false
	}
	return true
}

// startOrFinish starts the child, or ends the term if it cannot start.
func (s *Supervisor) startOrFinish(l *leadership, what string) {
	err := s.startChild(l)
	if err == nil {
		return
	}
	if errors.Is(err, errNoGuard) {
		s.log.Error("not starting the command without a dead-man guard; giving leadership back", "error", err)
		l.retry = true
		call(s.cfg.Events.HandingOver)
		s.finish(l, "no dead-man guard", false, ExitInternal)
		return
	}
	code := ExitInternal
	var se *StartError
	if errors.As(err, &se) {
		code = se.Code
	}
	s.log.Error(what, "error", err)
	s.finish(l, what, false, code)
}

// overdue starts the stop sequence if the lease's stop time has passed or
// the guard fired, and reports whether the leadership is stopping. Every
// event handler asks it first: after a freeze, the deadline and the guard
// rule whatever event the select happened to pick, a child's exit or a
// late renewal included (§1.3, §1.9).
func (s *Supervisor) overdue(l *leadership) bool {
	s.checkGuard(l)
	if !l.stopping && !s.clock.Now().Before(l.timeline.TermAt()) {
		s.finish(l, "lease deadline reached without a successful renewal", true, ExitLost)
	}
	return l.stopping
}

// errNoGuard: the term's guard could not be started.
var errNoGuard = errors.New("no dead-man guard")

// startChild starts the command with this term's epoch, in a fresh job,
// once the term's guard runs.
func (s *Supervisor) startChild(l *leadership) error {
	if err := s.ensureGuard(l); err != nil {
		return err
	}
	job, err := s.box.NewJob()
	if err != nil {
		return err
	}
	s.log.Debug("job made", "cgroup", job.Cgroup())
	cmd := s.cfg.Command
	cmd.Env = append(s.childEnv(l.lease.Epoch()), s.notify.env(s.cfg.Notify)...)
	// On a terminal the job writes to the same screen at once: the start
	// line goes out before the fork, or it could land inside the job's
	// first output (its prompt), and the pid is logged at debug level.
	onTerminal := ownTerminal()
	if onTerminal {
		s.log.Info("starting the child", "epoch", l.lease.Epoch())
	}
	// Its processes are heard from the fork on.
	s.notify.watch(job)
	c, err := StartChild(cmd, job)
	if err != nil {
		s.notify.watch(nil)
		_ = job.Remove()
		return err
	}
	job.Started(c.Pid())
	l.child, l.job, l.startedAt = c, job, s.clock.Now()
	if s.notify != nil {
		l.said = jobnotify.New(s.cfg.Notify.rules(), l.startedAt)
		s.armJobCheck(l)
	}
	l.killed = false
	l.started = true
	l.guard.watch(l.timeline.KillAt(), job)
	if onTerminal {
		s.log.Debug("child started", "pid", c.Pid(), "epoch", l.lease.Epoch())
	} else {
		s.log.Info("child started", "pid", c.Pid(), "epoch", l.lease.Epoch())
	}
	if f := s.cfg.Events.ChildStarted; f != nil {
		f(c.Pid())
	}
	l.history.started() // in the background, after the start
	return nil
}

// jobAlive reports whether anything of the last job can still run. Once it
// is gone, the job is forgotten: its process group id may be reused by
// strangers, and its cgroup is removed.
func (s *Supervisor) jobAlive(l *leadership) bool {
	if l.job == nil {
		return false
	}
	if l.child != nil || l.job.Alive() {
		return true
	}
	s.log.Debug("the job is gone", "cgroup", l.job.Cgroup())
	if err := l.job.Remove(); err != nil {
		s.log.Warn("cannot remove the job's cgroup", "error", err)
	}
	l.job = nil
	l.guard.gone()
	return false
}

// finish begins the stop sequence: stop signal to the job now, SIGKILL
// after the kill grace but never after the lease's kill point (§1.3).
func (s *Supervisor) finish(l *leadership, reason string, lost bool, code int) {
	l.stopping, l.lost, l.code = true, lost, code
	if l.endReason == "" {
		l.endReason = reason
	}
	l.childCode = !lost && l.child != nil
	if l.restartAt != nil {
		l.restartAt.Stop()
		l.restartAt = nil
	}
	running := s.jobAlive(l)
	msg := "leadership ending"
	if running {
		msg = "stopping child"
	}
	s.logEnding(l, msg, reason, lost, running)
	if f := s.cfg.Events.Stopping; f != nil {
		f(reason, lost)
	}
	if !running {
		return
	}
	stop := l.timeline.StartedAt(s.clock.Now())
	s.noteIntruders(l)
	s.signalJob(l, l.stopSignal)
	l.killAt = s.at(stop.KillAt())
}

// signalJob sends sig to every process of the job (then SIGCONT, so a
// stopped job acts on it at once).
func (s *Supervisor) signalJob(l *leadership, sig syscall.Signal) {
	if l.job == nil {
		return
	}
	if err := l.job.Signal(sig); err != nil {
		s.log.Error("signal the job", "signal", signals.Name(sig), "error", err)
		return
	}
	s.log.Debug("signalled the job", "signal", signals.Name(sig), "pgid", l.job.Pgid())
	if f := s.cfg.Events.ChildSignalled; f != nil {
		f(sig)
	}
}

// kill SIGKILLs the whole job.
func (s *Supervisor) kill(l *leadership) {
	if !s.jobAlive(l) {
		return
	}
	l.killed = true
	s.noteIntruders(l)
	if err := l.job.Kill(); err != nil {
		s.log.Error("kill the job", "error", err)
		return
	}
	s.log.Debug("killed the job", "pgid", l.job.Pgid(), "cgroup", l.job.Cgroup())
	if f := s.cfg.Events.ChildSignalled; f != nil {
		f(syscall.SIGKILL)
	}
}

// sweep SIGKILLs what is left of a job already killed, quietly: the kill
// was reported when it was sent.
func (s *Supervisor) sweep(l *leadership) {
	if l.job == nil {
		return
	}
	if err := l.job.Kill(); err != nil {
		s.log.Debug("kill the job again", "error", err)
	}
}

// forward passes a signal to the running child's process group; with no
// child running it is dropped, never kept for a later one (DESIGN §1.11).
func (s *Supervisor) forward(l *leadership, sig os.Signal) {
	sn, ok := sig.(syscall.Signal)
	if !ok || l.child == nil || l.stopping {
		s.log.Debug("signal not forwarded: no child running", "signal", sig)
		return
	}
	if err := l.child.Signal(sn); err != nil {
		s.log.Error("forward signal", "signal", signals.Name(sn), "error", err)
		return
	}
	if f := s.cfg.Events.ChildSignalled; f != nil {
		f(sn)
	}
}

// dropForwarded discards signals queued while no child ran.
func (s *Supervisor) dropForwarded() {
	for {
		select {
		case sig := <-s.cfg.Forward:
			s.log.Debug("signal not forwarded: it came before this term", "signal", sig)
		default:
			return
		}
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

func tickerC(t Ticker) <-chan time.Time {
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

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
