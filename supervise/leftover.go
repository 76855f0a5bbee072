//go:build linux

package supervise

import (
	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/signals"
)

// sweepResult is what one sweep of leftover jobs found.
type sweepResult struct {
	found []contain.Leftover
	err   error
}

// sweepLeftovers kills what jobs of this key left on this host when their
// leaderrun and its guard were killed together (DESIGN §1.9), waits until it
// is gone, and logs one warning per job. It runs once when leaderrun starts,
// before it campaigns, so a leftover dies at once even on a host that does
// not win, and again before each term's first child (see startSweep).
func (s *Supervisor) sweepLeftovers() error {
	if err := contain.SealError(); err != nil {
		s.log.Warn("job markers are not sealed: a job that switches to another user is not found by its marker if leaderrun and its guard are killed together", "error", err)
	}
	r := s.sweepNow()
	s.logSweep(r)
	return r.err
}

func (s *Supervisor) sweepNow() sweepResult {
	found, err := s.box.Sweep(contain.SweepTimeout)
	s.sweptClean.Store(err == nil)
	return sweepResult{found: found, err: err}
}

// termSweep is a term's sweep: once a sweep of this process found every
// leftover gone (at the latest the one at start, before the first
// campaign), only a Recheck, which reads the registry of live jobs and the
// job cgroups' directories but no /proc, and a full sweep only when it
// finds a job of a dead leaderrun of the key or cannot tell (DESIGN §1.9:
// what could be left since that sweep is a job of a leaderrun that died
// since, and every such job is registered).
func (s *Supervisor) termSweep() sweepResult {
	if s.sweptClean.Load() {
		why := s.box.Recheck()
		if why == "" {
			return sweepResult{}
		}
		s.log.Debug("sweeping leftovers", "reason", why)
	}
	return s.sweepNow()
}

func (s *Supervisor) logSweep(r sweepResult) {
	for _, j := range r.found {
		args := []any{"leaderrun_pid", j.Owner, "count", len(j.Pids), "processes", contain.ProcessList(j.Processes()), "marker", j.Token}
		if j.Cgroup != "" {
			args = append(args, "cgroup", j.Cgroup)
		}
		if j.Check {
			s.log.Warn("killed what a health check of this key left running: its leaderrun is dead", args...)
			continue
		}
		s.log.Warn("killed a leftover job of this key: its leaderrun is dead", args...)
	}
}

// termSweepRun is a term's sweep running beside whatever does not depend
// on it: its result, and wait, which blocks until it is over.
type termSweepRun struct {
	c    <-chan sweepResult
	wait func()
}

// startSweep starts a term's sweep (termSweep) of leftover jobs of this key
// beside the confirming renewal (campaign) and then the term's control
// loop, which goes on renewing meanwhile: a sweep that meets a slow /proc
// or a job still forking must not cost the lease. It starts once the key
// is won, never before: a leaderrun of the key that dies before then may
// leave a job (DESIGN §1.9). The term's first child starts only once the
// result is in; wait blocks until the sweep is over, so that nothing of it
// outlives the term, or the campaign when the term does not begin.
func (s *Supervisor) startSweep() *termSweepRun {
	c := make(chan sweepResult, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c <- s.termSweep()
	}()
	return &termSweepRun{c: c, wait: func() { <-done }}
}

// drop waits for a sweep whose term does not begin (the confirm failed,
// the key is given back) and logs what it killed.
func (s *Supervisor) drop(sw *termSweepRun) {
	sw.wait()
	s.logSweep(<-sw.c)
}

// swept handles the result of the term's sweep and reports whether the
// first child may start. If some leftover is still alive after
// contain.SweepTimeout it starts nothing: it ends the term, and leaderrun
// exits 125.
func (s *Supervisor) swept(l *leadership, r sweepResult) bool {
	s.logSweep(r)
	if r.err != nil {
		s.log.Error("not starting the command beside a leftover job", "error", r.err)
		if !l.stopping {
			s.finish(l, "a leftover job of this key is still alive", false, ExitInternal)
		}
		return false
	}
	return !l.stopping
}

// noteIntruders logs the processes a job moved into leaderrun's own cgroup;
// they are stopped and killed with the job.
func (s *Supervisor) noteIntruders(l *leadership) {
	if l.job == nil {
		return
	}
	if pids := l.job.Intruders(); len(pids) > 0 {
		s.log.Warn("processes of the job moved into leaderrun's own cgroup; stopping them with the job", "processes", contain.ProcessList(contain.Named(pids)))
	}
}

// logChildExit says how the child ended, with its exit code as a number:
// at WARN when it failed on its own (a non-zero exit, a signal leaderrun
// did not send), at INFO otherwise.
func (s *Supervisor) logChildExit(l *leadership, c *Child) {
	args := []any{"pid", c.Pid(), "exit_code", c.ExitCode(), "status", c.Describe()}
	if c.ExitCode() != 0 && !l.stopping {
		s.log.Warn("child exited", args...)
		return
	}
	s.log.Info("child exited", args...)
}

// logEnding says why the term ends: at WARN when leadership was lost, at
// INFO when a running child is stopped, at DEBUG when nothing runs any
// more (the child exited, which was said). Processes the child left running
// after its own exit (a nohup'ed job) are named at WARN, pid and command,
// as they are stopped.
func (s *Supervisor) logEnding(l *leadership, msg, reason string, lost, running bool) {
	switch {
	case lost:
		s.log.Warn(msg, "reason", reason)
	case running && l.child == nil:
		// Only leftovers of the child are alive.
	case running:
		s.log.Info(msg, "reason", reason)
	default:
		s.log.Debug(msg, "reason", reason)
	}
	if running && l.child == nil && l.job != nil {
		s.log.Warn("stopping processes the child left running", "reason", reason, "signal", signals.Name(l.stopSignal),
			"processes", contain.ProcessList(l.job.Processes()))
	}
}

// routineEnd reports whether the term ends as a trivial run does: the
// child exited 0 on its own and nothing was lost, so its release is not
// news (logged at DEBUG).
func routineEnd(l *leadership) bool {
	return l.succeeded && !l.lost && l.code == 0 && !l.retry
}
