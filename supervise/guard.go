//go:build linux

package supervise

import (
	"errors"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/guard"
)

// guardExitTimeout bounds the wait for the guard to exit after "done".
const guardExitTimeout = 2 * time.Second

// GuardConfig says how to start the dead-man guard (package guard): a
// separate process that SIGKILLs the child's group if the kill point passes
// or leaderrun dies, whatever state leaderrun itself is in.
type GuardConfig struct {
	// Path, Args and Env run the guard; leaderrun re-executes itself.
	Path string
	Args []string
	Env  []string
	// Hello is the guard's first message: how to reach the backend to
	// release the lease if leaderrun dies.
	Hello []byte
}

// guardProc is the parent's end of one guard: a pipe it writes without
// ever blocking, and the guard's pid.
type guardProc struct {
	pid    int
	fd     int // write end of the guard's stdin, non-blocking
	exited chan struct{}
	log    hclog.Logger
	broken bool
}

// startGuard starts a guard for one leadership term. The guard leads its
// own process group (terminal signals meant for leaderrun do not reach it)
// and has no PDEATHSIG: it must outlive a dead leaderrun.
func startGuard(cfg *GuardConfig, handle string, log hclog.Logger) (*guardProc, error) {
	var p [2]int
	// O_CLOEXEC on both ends: the child must never hold the write end, or
	// the guard would not see leaderrun's death as end of input.
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(p[1], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, err
	}
	g := &guardProc{fd: p[1], exited: make(chan struct{}), log: log}
	attr := &syscall.ProcAttr{
		Env:   cfg.Env,
		Files: []uintptr{uintptr(p[0]), 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	pid, err := children.startProcess(func() (int, error) {
		return syscall.ForkExec(cfg.Path, cfg.Args, attr)
	}, func(syscall.WaitStatus) { close(g.exited) })
	unix.Close(p[0])
	if err != nil {
		unix.Close(p[1])
		return nil, err
	}
	g.pid = pid
	g.send(guard.Hello(cfg.Hello))
	g.send(guard.Lease(handle))
	log.Debug("guard started", "pid", pid)
	return g, nil
}

// watch hands the guard a new child group and the kill point.
func (g *guardProc) watch(pgid int, killAt time.Time, now time.Time) {
	g.send(guard.Watch(pgid, monoAt(killAt, now)))
}

// extend moves the guard's kill point.
func (g *guardProc) extend(killAt time.Time, now time.Time) {
	g.send(guard.Extend(monoAt(killAt, now)))
}

// stop tells the guard its job is over and waits for it to exit.
func (g *guardProc) stop() {
	g.send(guard.Done())
	unix.Close(g.fd)
	select {
	case <-g.exited:
	case <-time.After(guardExitTimeout):
		g.log.Error("guard did not exit; killing it", "pid", g.pid)
		_ = syscall.Kill(g.pid, syscall.SIGKILL)
		<-g.exited
	}
}

// send writes one message without blocking: a guard that stopped reading
// must not stall the supervisor, whose own timeline still protects the lease.
func (g *guardProc) send(msg string) {
	if g.broken {
		return
	}
	if _, err := unix.Write(g.fd, []byte(msg)); err != nil {
		g.broken = errors.Is(err, syscall.EPIPE)
		g.log.Error("cannot reach the guard", "error", err)
	}
}

// monoAt converts a point on the supervisor's clock into absolute
// CLOCK_MONOTONIC nanoseconds, the clock every process on the host shares.
func monoAt(t, now time.Time) int64 {
	return guard.MonoNow() + int64(t.Sub(now))
}
