//go:build linux

package supervise

import (
	"fmt"
	"os"

	"github.com/leaderrun/leaderrun/guard"
)

// lockFile is a lease backed by a lock descriptor (the local backend): the
// guard keeps a duplicate of it until the job is gone (DESIGN §1.9).
type lockFile interface {
	LockFile() *os.File
}

// ensureGuard starts the term's guard before its first child: no child
// runs unguarded unless the operator opted out (DESIGN §1.9).
func (s *Supervisor) ensureGuard(l *leadership) error {
	if s.cfg.Guard == nil || l.guard != nil {
		return nil
	}
	var hold *os.File
	if lf, ok := l.lease.(lockFile); ok {
		hold = lf.LockFile()
	}
	g, err := guard.Start(s.cfg.Guard, l.lease.Handle(), hold, children.startProcess, s.log.Named("guard"))
	if err != nil {
		return fmt.Errorf("%w: %v", errNoGuard, err)
	}
	s.log.Debug("guard started", "pid", g.Pid())
	l.guard = g
	return nil
}

// checkGuard ends the term once the guard says it fired: its kill point
// passed, so it kills the job and releases the lease (DESIGN §1.9). It reads
// all the guard wrote so far, in this goroutine: the guard says "fired"
// before it kills, so a child that died of the guard's SIGKILL, or a
// renewal answered after the guard fired, is seen for what it is. The term
// ends as a loss (123, or campaign again under --on-lost rejoin), whatever
// it was stopping for: the lease is the guard's to release now.
func (s *Supervisor) checkGuard(l *leadership) {
	if l.guardFired || l.guard == nil || !l.guard.HasFired() {
		return
	}
	s.guardFired(l)
}

// guardFired ends the term for a guard that fired, as checkGuard tells.
func (s *Supervisor) guardFired(l *leadership) {
	l.guardFired = true
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
	old := l.guard
	old.Kill() // reaped already; collects its reply reader
	// Forgotten before the term may end: its pipe is closed, and the
	// descriptor's number free for another file.
	l.guard = nil
	if isClosed(old.Released()) {
		l.guardReleased = true
	}
	if !l.guardFired && old.HasFired() {
		s.guardFired(l)
	}
	if l.stopping {
		s.log.Warn("the dead-man guard exited while stopping", "pid", old.Pid())
		return
	}
	s.log.Error("the dead-man guard died; starting another", "pid", old.Pid())
	if err := s.ensureGuard(l); err != nil {
		s.log.Error("cannot restart the dead-man guard; stopping the job", "error", err)
		l.retry = true
		s.finish(l, "no dead-man guard", false, ExitInternal)
		return
	}
	l.guardKillAt = l.timeline.KillAt()
	at := guard.MonoAt(l.guardKillAt, s.clock.Now)
	if l.job != nil {
		l.guard.Watch(at, guardJob(l.job))
	} else {
		l.guard.Extend(at) // no job right now: the kill point holds all the same
	}
}

func guardExited(l *leadership) <-chan struct{} {
	if l.guard == nil {
		return nil
	}
	return l.guard.Exited()
}

func guardFiredC(l *leadership) <-chan struct{} {
	if l.guard == nil || l.guardFired {
		return nil
	}
	return l.guard.Fired()
}

func guardReleasedC(l *leadership) <-chan struct{} {
	if l.guard == nil || l.guardReleased {
		return nil
	}
	return l.guard.Released()
}
