//go:build linux

package supervise

// ensureGuard starts the term's guard before its first child: no child
// runs unguarded unless the operator opted out (DESIGN §1.9).
func (s *Supervisor) ensureGuard(l *leadership) error {
	return l.guard.start(s.cfg.Guard, l.lease, s.log)
}

// checkGuard ends the term once the guard says it fired: its kill point
// passed, so it kills the job and releases the lease (DESIGN §1.9). It reads
// all the guard wrote so far, in this goroutine: the guard says "fired"
// before it kills, so a child that died of the guard's SIGKILL, or a
// renewal answered after the guard fired, is seen for what it is.
func (s *Supervisor) checkGuard(l *leadership) {
	if l.guard.firedNow() {
		s.guardFired(l)
	}
}

// guardFired ends the term for a guard that fired. The term ends as a loss
// (123, or campaign again under --on-lost rejoin), whatever it was stopping
// for: the lease is the guard's to release now.
func (s *Supervisor) guardFired(l *leadership) {
	const reason = "the dead-man guard fired: its kill point passed, it kills the job and releases leadership"
	if !l.stopping {
		s.finish(l, reason, true, ExitLost)
		return
	}
	// Already stopping: the term still ends as a loss, not with the status
	// of a child the guard killed.
	wasLost := l.lost
	l.lost, l.code, l.childCode = true, ExitLost, false
	s.log.Warn("leadership ending", "reason", reason)
	if f := s.cfg.Events.Stopping; f != nil && !wasLost {
		f(reason, true) // observers count the loss once
	}
}

// onGuardExit: the guard died mid-term. Start another one and hand it the
// running job; if that fails, the job is stopped and leadership given back
// (DESIGN §1.9). A guard that fired before it died ended the term.
func (s *Supervisor) onGuardExit(l *leadership) {
	pid, fired := l.guard.bury()
	if fired {
		s.guardFired(l)
	}
	if l.stopping {
		s.log.Warn("the dead-man guard exited while stopping", "pid", pid)
		return
	}
	s.log.Error("the dead-man guard died; starting another", "pid", pid)
	if err := s.ensureGuard(l); err != nil {
		s.log.Error("cannot restart the dead-man guard; stopping the job", "error", err)
		l.retry = true
		call(s.cfg.Events.HandingOver)
		s.finish(l, "no dead-man guard", false, ExitInternal)
		return
	}
	l.guard.watch(l.timeline.KillAt(), l.job)
}
