//go:build linux

package supervise

import (
	"context"

	"github.com/leaderrun/leaderrun/locker"
)

// TermHooks frame each leadership term for features that decide whether
// the term's child runs and what is left on the backend afterwards (the
// once-per gate). Both are optional and called from the supervisor's
// goroutine; they may make backend calls within their ctx.
type TermHooks struct {
	// BeforeStart is called once per term, while leading, before the
	// term's first child starts; ctx ends at the term's stop point. With
	// skip true the child is not started: the term ends as if the child had
	// exited with code (reason is logged), leadership is released, and
	// leaderrun exits with code.
	BeforeStart func(ctx context.Context, lease locker.Lease) (skip bool, reason string, code int)

	// AfterRun is called once per term in which a child started, after the
	// child's whole process group is gone and BEFORE the lease is released,
	// so what it writes is there when the next holder looks (DESIGN §1.4).
	// succeeded says whether a child exited 0 on its own during the term
	// (not stopped by leaderrun). ctx is bounded like a release.
	AfterRun func(ctx context.Context, lease locker.Lease, succeeded bool)
}

// skipTerm asks BeforeStart whether this term's child may start. It
// reports true when the term is ending instead: skipped, or overdue after
// the hook's backend calls.
func (s *Supervisor) skipTerm(ctx context.Context, l *leadership) bool {
	f := s.cfg.Term.BeforeStart
	if f == nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, l.timeline.TermAt().Sub(s.clock.Now()))
	defer cancel()
	skip, reason, code := f(hctx, l.lease)
	if skip {
		s.finish(l, reason, false, code)
		return true
	}
	return s.overdue(l)
}

// afterRun tells AfterRun how the term went, before the release.
func (s *Supervisor) afterRun(l *leadership) {
	f := s.cfg.Term.AfterRun
	if f == nil || !l.started {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	f(ctx, l.lease, l.succeeded)
}
