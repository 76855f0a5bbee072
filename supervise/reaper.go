//go:build linux

package supervise

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper is the one place in a leaderrun process that calls wait4. It reaps
// every child: the processes leaderrun starts, whose exit status it hands to
// their waiters, and orphans of the child's group that the kernel re-parents
// to leaderrun (a child subreaper, or PID 1 in a container), which would
// otherwise stay zombies and keep their process group "alive" (DESIGN §3).
//
// Because it reaps everything, code in a leaderrun process must start
// processes through startProcess, never through os/exec's Wait.
type reaper struct {
	once    sync.Once
	mu      sync.Mutex // held across fork+register and across wait4+deliver
	waiters map[int]waiter
	reaped  atomic.Uint64 // children reaped so far
}

// waiter is told what becomes of one child: exited once it is reaped, and
// stopped, when set, each time a signal stops it.
type waiter struct {
	exited  func(syscall.WaitStatus)
	stopped func(syscall.Signal)
}

var children = &reaper{waiters: map[int]waiter{}}

// start begins reaping on SIGCHLD. The goroutine lives as long as the
// process, like the signal handler it serves.
func (r *reaper) start() {
	r.once.Do(func() {
		sigchld := make(chan os.Signal, 1)
		signal.Notify(sigchld, syscall.SIGCHLD)
		go r.loop(sigchld)
	})
}

func (r *reaper) loop(sigchld <-chan os.Signal) {
	for range sigchld {
		r.reap()
	}
}

// reap collects every exited child without blocking. SIGCHLD coalesces, so
// one signal may stand for many exits. It also hears of children stopped by
// a signal (WUNTRACED; each stop is reported once): a stop is no exit, and
// only a waiter that asked for stops hears of it.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		w, ok := r.waiters[pid]
		if ws.Stopped() {
			if ok && w.stopped != nil {
				w.stopped(ws.StopSignal())
			}
			continue
		}
		r.reaped.Add(1)
		if ok {
			delete(r.waiters, pid)
			w.exited(ws)
		}
	}
}

// startProcess forks through fork and registers done to receive the exit
// status. Holding mu across both means the reaper cannot collect the new
// pid before its waiter is known.
func (r *reaper) startProcess(fork func() (int, error), done func(syscall.WaitStatus)) (int, error) {
	return r.spawn(fork, waiter{exited: done})
}

// spawn is startProcess for a waiter that may also hear of stops.
func (r *reaper) spawn(fork func() (int, error), w waiter) (int, error) {
	r.start()
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	// A SIGCHLD from this pid can only be handled by a reap that waits for
	// mu, so it finds the waiter registered.
	r.waiters[pid] = w
	return pid, nil
}

// BecomeSubreaper makes orphans of the child's process group re-parent to
// this process instead of init, so they are reaped here and "the group is
// gone" can be observed reliably before leadership is released.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Started reports whether pid is a live process this leaderrun started (the
// child or a guard), as opposed to an orphan re-parented to it.
func Started(pid int) bool {
	children.mu.Lock()
	defer children.mu.Unlock()
	_, ok := children.waiters[pid]
	return ok
}

// Reaped counts the children this leaderrun has reaped: package contain
// sees by it whether a child of the job vanished while it looked
// (contain.Options.Reaped).
func Reaped() uint64 { return children.reaped.Load() }

// HoldReaps runs f while no child of this leaderrun can be reaped, so a
// child f finds unreaped keeps its pid and process group number until f
// returns (contain.Options.HoldReaps). f must not start processes or call
// Started.
func HoldReaps(f func()) {
	children.mu.Lock()
	defer children.mu.Unlock()
	f()
}
