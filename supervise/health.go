//go:build linux

package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

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
			ok, out, err := runHealthCheck(ctx, w.cfg)
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
	s := &Supervisor{cfg: Config{Control: ControlConfig{Health: hc}}, log: logline.Wrap(log), clock: RealClock{}}
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
// last one's process group killed.
func (h *Health) Wait() {
	if h != nil {
		h.w.wait()
	}
}

// wait returns once the checks stopped (their context ended) and the last
// one's process group was killed: nothing of a check outlives leaderrun.
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

// runHealthCheck runs the command once through /bin/sh -c in a process
// group of its own, started through the one reaper (reaper.go). A check
// still running at its timeout is killed, group and all, and fails.
func runHealthCheck(ctx context.Context, hc HealthCheck) (ok bool, output string, err error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return false, "", err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		r.Close()
		wr.Close()
		return false, "", err
	}
	done := make(chan syscall.WaitStatus, 1)
	attr := &syscall.ProcAttr{
		Env:   hc.Env,
		Files: []uintptr{devnull.Fd(), wr.Fd(), wr.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	pid, err := children.startProcess(func() (int, error) {
		return syscall.ForkExec("/bin/sh", []string{"sh", "-c", hc.Command}, attr)
	}, func(ws syscall.WaitStatus) { done <- ws })
	wr.Close()
	devnull.Close()
	if err != nil {
		r.Close()
		return false, "", err
	}
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
	select {
	case ws = <-done:
		// What the check left in its group in the background (a daemon
		// that closed its output) goes with it: nothing of a check
		// outlives it.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	case <-t.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		err = context.DeadlineExceeded
	case <-ctx.Done():
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		err = ctx.Err()
	}
	select {
	case <-read:
	case <-time.After(100 * time.Millisecond):
		// Something the check started still holds its output: it goes
		// with the check's group.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-read
	}
	r.Close()
	if err != nil {
		return false, out.String(), errTimedOut(hc.Timeout, err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return false, out.String(), exitError(ws)
	}
	return true, out.String(), nil
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
