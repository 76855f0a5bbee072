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

// onGuardExit: the guard died mid-term. Start another one and hand it the
// running job; if that fails, the job is stopped and leadership given back
// (DESIGN §1.9).
func (s *Supervisor) onGuardExit(l *leadership) {
	old := l.guard
	l.guard = nil
	old.Kill() // reaped already; collects its reply reader
	if isClosed(old.Released()) {
		l.guardReleased = true
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
	if l.job != nil {
		l.guardKillAt = l.timeline.KillAt()
		l.guard.Watch(guard.MonoAt(l.guardKillAt, s.clock.Now), guardJob(l.job))
	}
}

func guardExited(l *leadership) <-chan struct{} {
	if l.guard == nil {
		return nil
	}
	return l.guard.Exited()
}

func guardReleasedC(l *leadership) <-chan struct{} {
	if l.guard == nil || l.guardReleased {
		return nil
	}
	return l.guard.Released()
}
