//go:build linux

package contain

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// testReaper stands in the test process for leaderrun's reaper (package
// supervise): the one caller of wait4, it reaps every child, the ones the
// tests start (whose exits it hands over) and the orphans re-parented to
// the test process, a child subreaper. It counts its reaps and can be held
// off, as contain.Options wants of it. The tests start processes through
// it, never through os/exec, whose Wait it would race; the C programs are
// built before it starts (TestMain).
type testReaper struct {
	mu      sync.Mutex
	waiters map[int]chan struct{}
	reaped  atomic.Uint64
}

var reaper = &testReaper{waiters: map[int]chan struct{}{}}

func (r *testReaper) run() {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	tick := time.NewTicker(5 * time.Millisecond)
	for {
		select {
		case <-sigchld:
		case <-tick.C:
		}
		r.reap()
	}
}

func (r *testReaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.reaped.Add(1)
		if done, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			close(done)
		}
	}
}

// start forks and execs argv; done is closed once the process is reaped.
func (r *testReaper) start(argv, env []string, sys *syscall.SysProcAttr) (pid int, done <-chan struct{}, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: sys})
	if err != nil {
		return 0, nil, err
	}
	c := make(chan struct{})
	r.waiters[pid] = c
	return pid, c, nil
}

// known reports a live process the tests started, as supervise.Started
// does for leaderrun.
func (r *testReaper) known(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[pid]
	return ok
}

func (r *testReaper) count() uint64 { return r.reaped.Load() }

func (r *testReaper) hold(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}
