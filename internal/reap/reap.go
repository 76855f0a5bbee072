//go:build linux

// Package reap is the one caller of wait4 in a process that reaps every
// child: the processes it starts, whose exit status it hands to their
// waiters, and the orphans re-parented to it as a child subreaper (or PID 1
// in a container), which would otherwise stay zombies and keep their
// process group "alive" (DESIGN §3). Package supervise runs leaderrun's
// reaper on it; the tests of package contain, which cannot import
// supervise, run theirs on it too.
//
// Because a Reaper reaps everything, code in its process must start
// processes through StartProcess, never through os/exec's Wait.
package reap

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// A Reaper reaps the children of this process. Make one with New.
type Reaper struct {
	once    sync.Once
	mu      sync.Mutex // held across fork+register and across wait4+deliver
	waiters map[int]Waiter
	reaped  atomic.Uint64 // children reaped so far
}

// A Waiter is told what becomes of one child: Exited once it is reaped,
// and Stopped, when set, each time a signal stops it.
type Waiter struct {
	Exited  func(syscall.WaitStatus)
	Stopped func(syscall.Signal)
}

// New returns a Reaper that does not reap yet: Start, or the first
// StartProcess, begins it.
func New() *Reaper {
	return &Reaper{waiters: map[int]Waiter{}}
}

// Start begins reaping on SIGCHLD. The goroutine lives as long as the
// process, like the signal handler it serves. Calling it again does
// nothing.
func (r *Reaper) Start() {
	r.once.Do(func() {
		sigchld := make(chan os.Signal, 1)
		signal.Notify(sigchld, syscall.SIGCHLD)
		go r.loop(sigchld)
	})
}

func (r *Reaper) loop(sigchld <-chan os.Signal) {
	for range sigchld {
		r.Reap()
	}
}

// Reap collects every exited child without blocking. SIGCHLD coalesces, so
// one signal may stand for many exits. It also hears of children stopped by
// a signal (WUNTRACED; each stop is reported once): a stop is no exit and
// no reap, and only a waiter that asked for stops hears of it.
func (r *Reaper) Reap() {
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
			if ok && w.Stopped != nil {
				w.Stopped(ws.StopSignal())
			}
			continue
		}
		r.reaped.Add(1)
		if ok {
			delete(r.waiters, pid)
			w.Exited(ws)
		}
	}
}

// StartProcess starts reaping if need be, forks through fork and registers
// done to receive the exit status. Holding mu across both means the reaper
// cannot collect the new pid before its waiter is known.
func (r *Reaper) StartProcess(fork func() (int, error), done func(syscall.WaitStatus)) (int, error) {
	return r.Spawn(fork, Waiter{Exited: done})
}

// Spawn is StartProcess for a waiter that may also hear of stops.
func (r *Reaper) Spawn(fork func() (int, error), w Waiter) (int, error) {
	r.Start()
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

// Started reports whether pid is a live process started through
// StartProcess, as opposed to an orphan re-parented to this process.
func (r *Reaper) Started(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[pid]
	return ok
}

// Reaped counts the children reaped so far.
func (r *Reaper) Reaped() uint64 { return r.reaped.Load() }

// Hold runs f while no child can be reaped, so a child f finds unreaped
// keeps its pid and process group number until f returns. f must not start
// processes or call Started.
func (r *Reaper) Hold(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}
