//go:build linux

package contain

import (
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/internal/reap"
)

// testReaper stands in the test process for leaderrun's reaper (package
// supervise, which contain cannot import), on the same package reap: the
// one caller of wait4, it reaps every child, the ones the tests start
// (whose exits it hands over) and the orphans re-parented to the test
// process, a child subreaper. It counts its reaps and can be held off, as
// contain.Options wants of it. The tests start processes through it, never
// through os/exec, whose Wait it would race; the C programs are built
// before it starts (TestMain).
type testReaper struct{ *reap.Reaper }

var reaper = testReaper{reap.New()}

// run reaps on SIGCHLD and, besides, every 5ms.
func (r testReaper) run() {
	r.Start()
	for range time.Tick(5 * time.Millisecond) {
		r.Reap()
	}
}

// start forks and execs argv; done is closed once the process is reaped.
func (r testReaper) start(argv, env []string, sys *syscall.SysProcAttr) (pid int, done <-chan struct{}, err error) {
	c := make(chan struct{})
	pid, err = r.StartProcess(func() (int, error) {
		return syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: sys})
	}, func(syscall.WaitStatus) { close(c) })
	if err != nil {
		return 0, nil, err
	}
	return pid, c, nil
}
