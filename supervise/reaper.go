//go:build linux

package supervise

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/reap"
)

// children is the one reaper in a leaderrun process (package reap): the
// one place that calls wait4. It reaps every child: the processes
// leaderrun starts, whose exit status it hands to their waiters, and
// orphans of the child's group that the kernel re-parents to leaderrun (a
// child subreaper, or PID 1 in a container), which would otherwise stay
// zombies and keep their process group "alive" (DESIGN §3).
//
// Because it reaps everything, code in a leaderrun process must start
// processes through startProcess, never through os/exec's Wait.
var children = reaper{reap.New()}

type reaper struct{ *reap.Reaper }

// startProcess forks through fork and registers done to receive the exit
// status; the reaper cannot collect the new pid before its waiter is
// known.
func (r reaper) startProcess(fork func() (int, error), done func(syscall.WaitStatus)) (int, error) {
	return r.StartProcess(fork, done)
}

// waiter is told what becomes of one child: exited once it is reaped, and
// stopped, when set, each time a signal stops it.
type waiter struct {
	exited  func(syscall.WaitStatus)
	stopped func(syscall.Signal)
}

// spawn is startProcess for a waiter that may also hear of stops.
func (r reaper) spawn(fork func() (int, error), w waiter) (int, error) {
	return r.Spawn(fork, reap.Waiter{Exited: w.exited, Stopped: w.stopped})
}

// BecomeSubreaper makes orphans of the child's process group re-parent to
// this process instead of init, so they are reaped here and "the group is
// gone" can be observed reliably before leadership is released.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Started reports whether pid is a live process this leaderrun started (the
// child or a guard), as opposed to an orphan re-parented to it.
func Started(pid int) bool { return children.Started(pid) }

// Reaped counts the children this leaderrun has reaped: package contain
// sees by it whether a child of the job vanished while it looked
// (contain.Options.Reaped).
func Reaped() uint64 { return children.Reaped() }

// HoldReaps runs f while no child of this leaderrun can be reaped, so a
// child f finds unreaped keeps its pid and process group number until f
// returns (contain.Options.HoldReaps). f must not start processes or call
// Started.
func HoldReaps(f func()) { children.Hold(f) }
