//go:build linux

package supervise

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/signals"
)

// The terminal. Run from an interactive shell, leaderrun is the shell's
// foreground job, but the child leads a process group of its own (for
// containment and forwarded signals), which is in the background: a job
// that reads the terminal would stop on SIGTTIN, and Ctrl-C would reach
// leaderrun, not the job. So when leaderrun's group is the foreground group
// of its controlling terminal on stdin, the child's group is made the
// terminal's foreground group while the child runs, as a job-control shell
// does for a foreground job, and leaderrun takes the terminal back when the
// child exits, before it starts another or exits itself. The keys then do
// what they do for any foreground job, within what a leader can allow:
//
//   - Ctrl-C (or Ctrl-\) reaches the job. A child killed by that SIGINT (or
//     SIGQUIT) ends leaderrun as the operator's stop: no restart, the rest
//     of the job gets the stop signal, exit 128+N (130 for Ctrl-C). A child
//     that handles the signal and exits is an exit like any other.
//   - Ctrl-Z stops the job, but a job stopped while its leaderrun leads
//     would hold the key doing nothing, and a leaderrun stopped too would
//     stop renewing while the job can be continued at any moment. So the
//     job is continued at once, still in the foreground, with a warning.
//
// Not a terminal, or leaderrun in the background: nothing changes.

// ownTerminal reports whether stdin is this process's controlling terminal
// and this process's group its foreground group. A terminal set to stop
// background writers (stty tostop) is left alone: leaderrun, out of the
// foreground, would be stopped by its first log line.
func ownTerminal() bool {
	t, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil || t.Lflag&unix.TOSTOP != 0 {
		return false
	}
	// ENOTTY when stdin is a terminal, but not this process's.
	fg, err := unix.IoctlGetUint32(0, unix.TIOCGPGRP)
	return err == nil && int(fg) == unix.Getpgrp()
}

// reclaimTerminal makes this process's group the foreground group of the
// terminal on stdin again, if take says so of the group that has it now.
// It reports whether it did. Out of the foreground, that call would earn
// this process SIGTTOU, which stops it: the signal is blocked on this
// thread around it, as a job-control shell blocks or ignores it.
func reclaimTerminal(take func(fg int) bool) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	sigsetAdd(&set, syscall.SIGTTOU)
	if unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old) != nil {
		return false
	}
	defer func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }()
	fg, err := unix.IoctlGetUint32(0, unix.TIOCGPGRP)
	if err != nil || int(fg) == unix.Getpgrp() || !take(int(fg)) {
		return false
	}
	return unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp()) == nil
}

func sigsetAdd(set *unix.Sigset_t, sig syscall.Signal) {
	bits := uint(unsafe.Sizeof(set.Val[0])) * 8
	n := uint(sig) - 1
	set.Val[n/bits] |= 1 << (n % bits)
}

// childStops is the running child's stop channel, or nil without one.
func childStops(c *Child) <-chan syscall.Signal {
	if c == nil {
		return nil
	}
	return c.Stopped()
}

// onChildStopped handles a stop of a child that holds the terminal. Ctrl-Z
// (SIGTSTP) cannot suspend a job while leaderrun leads (see above): it is
// continued at once and stays the foreground group. Other stops are left
// as they are, as they are for any child.
func (s *Supervisor) onChildStopped(l *leadership, sig syscall.Signal) {
	c := l.child
	if sig != syscall.SIGTSTP {
		s.log.Debug("the child was stopped", "pid", c.Pid(), "signal", signals.Name(sig))
		return
	}
	s.log.Warn("a leaderrun job cannot be suspended: continuing it in the foreground (Ctrl-C stops it)", "pid", c.Pid())
	if err := c.Signal(syscall.SIGCONT); err != nil {
		s.log.Error("continue the job", "error", err)
	}
}

// interruptedAtTerminal ends the term as leaderrun stopped by the operator
// when Ctrl-C (or Ctrl-\) at the terminal killed the child, and reports
// whether it did. The terminal sent the signal to the job's group only;
// leaderrun ends as it would had the signal reached it: no restart, the
// rest of the job stopped, and the child's 128+N as exit code.
func (s *Supervisor) interruptedAtTerminal(l *leadership, c *Child) bool {
	sig, ok := c.InterruptedAtTerminal()
	if !ok {
		return false
	}
	s.finish(l, "interrupted at the terminal ("+signals.Name(sig)+")", false, l.lastCode)
	return true
}
