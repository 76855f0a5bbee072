//go:build linux

package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/internal/logline"
)

// HealthCheck is --health-cmd and its settings (DESIGN §1.16): a shell
// command run every Interval, failed when it exits non-zero or runs past
// Timeout. A candidate whose last check failed does not campaign; a leader
// whose check failed Failures times in a row steps down.
type HealthCheck struct {
	Command  string
	Interval time.Duration
	Timeout  time.Duration
	Failures int
	// Env is the check's environment.
	Env []string
}

// healthOutputMax bounds the output of one check kept for the log.
const healthOutputMax = 4096

// healthState is what the checks said so far.
type healthState struct {
	checked bool // at least one check finished
	ok      bool // the last one passed
	fails   int  // failures in a row
	change  <-chan struct{}
}

// healthWatch runs the checks and keeps their state.
type healthWatch struct {
	cfg    HealthCheck
	mu     sync.Mutex
	st     healthState
	change chan struct{}
	done   chan struct{} // closed once no check runs and none will
}

// startHealth runs the health check until ctx ends; nil without one.
func (s *Supervisor) startHealth(ctx context.Context) *healthWatch {
	hc := s.cfg.Control.Health
	if hc == nil {
		return nil
	}
	w := &healthWatch{cfg: *hc, change: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			ok, out, err := runHealthCheck(ctx, w.cfg, s.box, s.log)
			if ctx.Err() != nil {
				return
			}
			w.record(ok)
			st := w.state()
			if ok {
				s.log.Debug("health check passed", "output", out)
			} else {
				s.log.Debug("health check failed", "error", err, "output", out, "in_a_row", st.fails)
				if st.fails == 1 || st.fails == w.cfg.Failures {
					s.log.Warn("health check failed", "error", err, "in_a_row", st.fails)
				}
			}
			if !s.sleep(ctx, w.cfg.Interval) {
				return
			}
		}
	}()
	return w
}

// Health is a health check that runs for as long as the context it was
// started with, read by the supervisors of one process one after another
// (ControlConfig.Shared): a --holders run builds a supervisor for each
// slot it wins, and its check and its count of failures go on across them.
type Health struct{ w *healthWatch }

// StartHealth runs hc until ctx ends; nil when hc is nil.
func StartHealth(ctx context.Context, hc *HealthCheck, log hclog.Logger) *Health {
	if hc == nil {
		return nil
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	// The jobs' Box changes with each slot won (one per term): the checks,
	// which go on across the terms, are contained in group mode (check.go).
	// Group mode cannot fail to open.
	box, _ := contain.Open(contain.Group, contain.Options{Known: Started, Reaped: Reaped, HoldReaps: HoldReaps})
	s := &Supervisor{cfg: Config{Control: ControlConfig{Health: hc}}, log: logline.Wrap(log), clock: RealClock{}, box: box}
	return &Health{w: s.startHealth(ctx)}
}

// Ready waits until the last check passed; false when ctx ended first.
func (h *Health) Ready(ctx context.Context) bool {
	if h == nil {
		return true
	}
	for {
		st := h.w.state()
		if st.checked && st.ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-st.change:
		}
	}
}

// Wait returns once the checks stopped after their context ended, the
// last one killed, all of it.
func (h *Health) Wait() {
	if h != nil {
		h.w.wait()
	}
}

// wait returns once the checks stopped (their context ended) and the last
// one was killed, all of it (runHealthCheck): nothing of a check outlives
// leaderrun.
func (w *healthWatch) wait() {
	if w != nil {
		<-w.done
	}
}

func (w *healthWatch) record(ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.st
	w.st.checked, w.st.ok = true, ok
	if ok {
		w.st.fails = 0
	} else {
		w.st.fails++
	}
	if was.checked != w.st.checked || was.ok != w.st.ok || was.fails != w.st.fails {
		close(w.change)
		w.change = make(chan struct{})
	}
}

func (w *healthWatch) state() healthState {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.change = w.change
	return st
}

// checkKillLimit bounds how long the end of a check waits for everything
// of it to be gone after SIGKILL. What survives that (a process stuck in
// the kernel) is logged and left to the running job's kill, or the next
// leaderrun's sweep: a check never holds leaderrun back for longer.
const checkKillLimit = 2 * time.Second

// checkDrain bounds the reading of a check's output once everything of the
// check is gone: its pipe then has no writer left, unless a process that
// escaped the check holds it.
const checkDrain = 100 * time.Millisecond

// runHealthCheck runs the command once through /bin/sh -c, contained as a
// job is (DESIGN §1.16): box.NewCheck gives it a cgroup of its own in
// cgroup mode, and in group mode its own process group and marker, which
// its descendants and its orphans re-parented to leaderrun carry. It is
// started through the one reaper (reaper.go). The check's result is its
// main process's exit status, or a failure once Timeout passed from its
// start; either way everything of the check is then killed and seen gone
// (a daemon it started, which may hold its output open, goes with it) and
// its output is read no longer. ctx ending kills the check at once.
func runHealthCheck(ctx context.Context, hc HealthCheck, box *contain.Box, log hclog.Logger) (ok bool, output string, err error) {
	// PR_SET_PDEATHSIG fires when the forking thread exits: keep it for
	// the check's life.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	job, err := box.NewCheck()
	if err != nil {
		return false, "", err
	}
	defer func() {
		if err := job.Remove(); err != nil {
			log.Warn("cannot remove the health check's cgroup", "error", err)
		}
	}()
	r, wr, err := os.Pipe()
	if err != nil {
		return false, "", err
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		wr.Close()
		return false, "", err
	}
	done := make(chan syscall.WaitStatus, 1)
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	job.SysProcAttr(sys)
	attr := &syscall.ProcAttr{
		Env:   append(slices.Clip(hc.Env), job.Env()),
		Files: []uintptr{devnull.Fd(), wr.Fd(), wr.Fd()},
		Sys:   sys,
	}
	pid, err := children.startProcess(func() (int, error) {
		return syscall.ForkExec("/bin/sh", []string{"sh", "-c", hc.Command}, attr)
	}, func(ws syscall.WaitStatus) { done <- ws })
	wr.Close()
	devnull.Close()
	if err != nil {
		return false, "", err
	}
	job.Started(pid)
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 1024)
		for {
			n, err := r.Read(buf)
			if out.Len() < healthOutputMax {
				out.Write(buf[:min(n, healthOutputMax-out.Len())])
			}
			if err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(hc.Timeout)
	defer t.Stop()
	var ws syscall.WaitStatus
	exited := false
	select {
	case ws = <-done:
		exited = true
	case <-t.C:
		err = errTimedOut(hc.Timeout, context.DeadlineExceeded)
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Nothing of a check outlives it: what it left running (a daemon,
	// which may hold its output open) is killed with it.
	if !killCheck(job, done, exited) {
		log.Warn("processes of a health check still alive after SIGKILL", "limit", checkKillLimit,
			"processes", contain.ProcessList(job.Processes()))
	}
	_ = r.SetReadDeadline(time.Now().Add(checkDrain))
	<-read
	if err != nil {
		return false, out.String(), err
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return false, out.String(), exitError(ws)
	}
	return true, out.String(), nil
}

// killCheck kills everything of the check and waits, for at most
// checkKillLimit, until it is gone and its first process reaped (done,
// unless exited says it was). It reports whether it saw that.
func killCheck(job *contain.Job, done <-chan syscall.WaitStatus, exited bool) bool {
	end := time.Now().Add(checkKillLimit)
	for {
		_ = job.Kill()
		if job.WaitGone(10 * time.Millisecond) {
			break
		}
		if time.Now().After(end) {
			return false
		}
	}
	if !exited {
		select {
		case <-done:
		case <-time.After(time.Until(end)):
			return false
		}
	}
	return true
}

func errTimedOut(d time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %v", d)
	}
	return err
}

func exitError(ws syscall.WaitStatus) error {
	if ws.Signaled() {
		return fmt.Errorf("killed by %v", ws.Signal())
	}
	return fmt.Errorf("exited %d", ws.ExitStatus())
}
