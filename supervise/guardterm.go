//go:build linux

package supervise

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
)

// guardTerm is the supervisor's side of one term's dead-man guard (DESIGN
// §1.9): the guard process, the kill point it last heard and what it said
// back, and the rules of what it is told when. What the term does about
// the guard's news (end as a loss, start another guard) is the
// supervisor's: guard.go. Owned by lead's goroutine, like the leadership
// it belongs to.
//
// Every message goes down a pipe that is never waited on: a guard whose
// pipe is full is killed, and one that died is seen exiting and replaced
// (guard.Process.send), so no method here blocks.
type guardTerm struct {
	now      func() time.Time // the supervisor's clock, for the guard's CLOCK_MONOTONIC
	proc     *guard.Process   // nil before the term's first child, after a death, or with no guard
	killAt   time.Time        // the kill point the guard last heard
	fired    bool             // the guard's kill point passed: the term is over
	released bool             // the guard released the lease itself
}

// lockFile is a lease backed by a lock descriptor (the local backend): the
// guard keeps a duplicate of it until the job is gone (DESIGN §1.9).
type lockFile interface {
	LockFile() *os.File
}

// start starts the term's guard, unless one runs or spec is nil (the
// operator opted out). It learns how to release the lease, and on the
// local backend gets the lock's descriptor.
func (g *guardTerm) start(spec *guard.Spec, lease locker.Lease, log hclog.Logger) error {
	if spec == nil || g.proc != nil {
		return nil
	}
	p, err := spawnGuard(spec, lease, log)
	if err != nil {
		return err
	}
	log.Debug("guard started", "pid", p.Pid())
	g.proc = p
	return nil
}

// spawnGuard starts a guard process for lease.
func spawnGuard(spec *guard.Spec, lease locker.Lease, log hclog.Logger) (*guard.Process, error) {
	var hold *os.File
	if lf, ok := lease.(lockFile); ok {
		hold = lf.LockFile()
	}
	p, err := guard.Start(spec, lease.Handle(), hold, children.startProcess, log.Named("guard"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoGuard, err)
	}
	return p, nil
}

// earlyGuard is a term's guard started beside the renewal that confirms a
// key just won, so that its fork and exec no longer come after that round
// trip. Until the term adopts it, it knows the lease and no kill point: a
// leaderrun that dies meanwhile has its lease released by it, and nothing
// else happens.
type earlyGuard struct {
	done chan struct{}
	proc *guard.Process
	err  error
}

// startEarlyGuard starts the guard of lease in the background; nil when
// the operator opted out.
func startEarlyGuard(spec *guard.Spec, lease locker.Lease, log hclog.Logger) *earlyGuard {
	if spec == nil {
		return nil
	}
	e := &earlyGuard{done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.proc, e.err = spawnGuard(spec, lease, log)
	}()
	return e
}

// drop kills the early guard of a term that did not begin (the confirm
// failed, or the key is given back), once it has started.
func (e *earlyGuard) drop() {
	if e == nil {
		return
	}
	<-e.done
	if e.proc != nil {
		e.proc.Kill()
	}
}

// adopt makes the early guard the term's, once it has started; its
// failure is start's, and startChild tries again.
func (g *guardTerm) adopt(e *earlyGuard, log hclog.Logger) error {
	if e == nil || g.proc != nil {
		e.drop()
		return nil
	}
	<-e.done
	if e.err != nil {
		return e.err
	}
	log.Debug("guard started", "pid", e.proc.Pid())
	g.proc = e.proc
	return nil
}

// watch hands the guard the job, a new run of it or, for a guard that
// replaces a dead one, the running one, with the lease's kill point. With
// no job (a restart waiting) it hears the kill point alone: that holds all
// the same.
func (g *guardTerm) watch(killAt time.Time, job *contain.Job) {
	if g.proc == nil {
		return
	}
	g.killAt = killAt
	at := guard.MonoAt(killAt, g.now)
	if job == nil {
		g.proc.Extend(at)
		return
	}
	g.proc.Watch(at, guard.Job{Pgid: job.Pgid(), Since: job.Since(), Token: job.Token(), Cgroup: job.Cgroup()})
}

// extend tells the guard the lease's kill point each time it moves, that is
// after every successful renewal. The guard's kill point is then
// leaderrun's own SIGKILL point for the current deadline, deadline - safety
// margin (§1.3, §1.9): never later, and earlier only by the microseconds
// MonoAt errs by, or, for the moment between accepting a renewal and the
// guard reading this message, by the time between that renewal's send and
// the one before. A leaderrun that stalls therefore meets the guard only
// once it is itself past its own kill point (a shorter stall leaves the job
// alone), and a guard that fired in that moment ends the term all the same
// (firedNow). A kill point told lazily, only when the old one came near,
// could pass a renew interval or more before leaderrun's own stop signal,
// and killed the jobs of leaderruns that had merely paused.
func (g *guardTerm) extend(killAt time.Time) {
	if g.proc == nil || killAt.Equal(g.killAt) {
		return
	}
	g.killAt = killAt
	g.proc.Extend(guard.MonoAt(killAt, g.now))
}

// gone tells the guard the job is gone: there is nothing left to kill.
func (g *guardTerm) gone() {
	if g.proc != nil {
		g.proc.Gone()
	}
}

// firedNow reads all the guard wrote so far, in the caller's goroutine, and
// reports true once: the first time it finds that the guard fired. The
// guard says "fired" before it kills, so a supervisor that asks before it
// acts on an event (a child's exit, a renewal's answer, a restart due) and
// before each child start sees a death by the guard's SIGKILL, or a renewal
// answered after the guard fired, for what it is.
func (g *guardTerm) firedNow() bool {
	if g.fired || g.proc == nil || !g.proc.HasFired() {
		return false
	}
	g.fired = true
	return true
}

// bury collects a guard that died mid-term (reaped already) and forgets it
// before anything else happens: its pipe is closed now, and the
// descriptor's number free for another file. It returns the guard's pid,
// and whether it fired before it died, once, as firedNow would.
func (g *guardTerm) bury() (pid int, fired bool) {
	old := g.proc
	old.Kill() // collects its reply reader
	g.proc = nil
	if isClosed(old.Released()) {
		g.released = true
	}
	if !g.fired && old.HasFired() {
		g.fired = true
		fired = true
	}
	return old.Pid(), fired
}

// releasedLease reports whether the guard released the lease itself (it
// says so after it fired and saw the job gone): the backend has nothing
// left to release.
func (g *guardTerm) releasedLease() bool {
	if g.proc != nil && isClosed(g.proc.Released()) {
		g.released = true
	}
	return g.released
}

// didFire reports whether the guard fired this term. Its lease is then
// the guard's to release, once the job is gone: maybe after a standby took
// the lock, so the supervisor leaves the record alone.
func (g *guardTerm) didFire() bool { return g.fired }

// stop tells the guard the term is over and waits for it to exit. Called
// after the release: a leaderrun dying in between still has its lease
// released by the guard.
func (g *guardTerm) stop() {
	if g.proc != nil {
		g.proc.Stop()
	}
}

// The guard's channels for the event loop's select; nil (never ready)
// without a guard, and once their news was taken.

func (g *guardTerm) exitedC() <-chan struct{} {
	if g.proc == nil {
		return nil
	}
	return g.proc.Exited()
}

func (g *guardTerm) firedC() <-chan struct{} {
	if g.proc == nil || g.fired {
		return nil
	}
	return g.proc.Fired()
}

// releasedC is ready once the guard released the lease; whoever receives
// from it calls noteReleased. A guard that released has fired: firedNow
// says so next.
func (g *guardTerm) releasedC() <-chan struct{} {
	if g.proc == nil || g.released {
		return nil
	}
	return g.proc.Released()
}

// noteReleased records what releasedC said.
func (g *guardTerm) noteReleased() { g.released = true }
