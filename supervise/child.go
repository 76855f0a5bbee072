//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/signals"
)

// Exit codes for a command that cannot be run, as in a shell; the table is
// internal/exitcode.
const (
	ExitNotExecutable = exitcode.NotExecutable
	ExitNotFound      = exitcode.NotFound
)

// StartError is a command that could not be started; Code is 126 or 127.
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Command is what the child runs.
type Command struct {
	// Path is the resolved executable (see ResolveCommand).
	Path string
	// Args includes the command name as Args[0].
	Args []string
	// Env is the child's complete environment.
	Env []string
}

// ResolveCommand finds name the way a shell does, so leaderrun can say
// "not found" (127) or "not executable" (126) before it campaigns.
func ResolveCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, checkInterpreter(name, path)
	}
	if errors.Is(err, syscall.EISDIR) {
		return "", &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: is a directory", name)}
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: permission denied", name)}
	}
	return "", &StartError{Code: ExitNotFound, Err: fmt.Errorf("%s: command not found", name)}
}

// Child is a running command: the first process of a job (package contain).
// It leads its own process group, for forwarded signals, and the kernel
// SIGKILLs it if leaderrun dies (DESIGN §1.9).
type Child struct {
	pid    int
	done   chan struct{}
	status syscall.WaitStatus

	// terminal: the child's group was made the foreground group of
	// leaderrun's terminal when it started (tty.go).
	terminal bool
	// hadTerminal: its group still held the terminal when it exited, and
	// leaderrun took it back then. Valid after Done.
	hadTerminal bool
	// stops hears of the signals that stop the child; only with terminal.
	stops chan syscall.Signal
}

// StartChild starts cmd as the first process of job, with inherited stdin,
// stdout and stderr. When leaderrun runs in the foreground of its terminal,
// the child's group becomes the terminal's foreground group until the child
// exits (tty.go).
func StartChild(cmd Command, job *contain.Job) (*Child, error) {
	c := &Child{done: make(chan struct{}), terminal: ownTerminal()}
	w := waiter{exited: func(ws syscall.WaitStatus) {
		c.status = ws
		if c.terminal {
			// Before Done: whoever sees the child gone finds the
			// terminal back in leaderrun's hands.
			c.hadTerminal = reclaimTerminal(func(fg int) bool { return fg == c.pid })
		}
		close(c.done)
	}}
	if c.terminal {
		c.stops = make(chan syscall.Signal, 1)
		w.stopped = func(sig syscall.Signal) {
			select {
			case c.stops <- sig:
			default: // one unhandled stop is enough to act on
			}
		}
	}
	started := make(chan error, 1)
	go func() {
		// PR_SET_PDEATHSIG fires when the forking THREAD exits, not the
		// process; keep this thread alive, and unshared, for the child's life.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, err := children.spawn(func() (int, error) {
			pid, err := forkExec(cmd, job, c.terminal)
			// Set under the reaper's lock, which exited runs under.
			c.pid = pid
			return pid, err
		}, w)
		started <- err
		if err == nil {
			<-c.done
		}
	}()
	if err := <-started; err != nil {
		if c.terminal {
			// A child that failed before or at exec may have taken the
			// terminal with it.
			reclaimTerminal(func(fg int) bool { return !signals.GroupExists(fg) })
		}
		if errors.Is(err, syscall.ENOENT) && job.Cgroup() != "" {
			// clone3 into a cgroup that vanished says ENOENT too.
			if _, serr := os.Stat(job.Cgroup()); serr != nil {
				return nil, fmt.Errorf("start %s: the job's cgroup is gone: %w", cmd.Path, serr)
			}
		}
		code := ExitNotExecutable
		if errors.Is(err, syscall.ENOENT) {
			code = ExitNotFound
		}
		return nil, &StartError{Code: code, Err: fmt.Errorf("start %s: %w", cmd.Path, err)}
	}
	return c, nil
}

func forkExec(cmd Command, job *contain.Job, foreground bool) (int, error) {
	sys := &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
		// The child makes its new group the terminal's foreground group
		// itself, before exec and with its signals still blocked (so no
		// SIGTTOU), as a job-control shell's child does: it never runs a
		// first instruction in the background. Ctty is stdin, in this
		// process's numbering.
		Foreground: foreground,
		Ctty:       0,
	}
	job.SysProcAttr(sys)
	attr := &syscall.ProcAttr{
		Env:   append(cmd.Env[:len(cmd.Env):len(cmd.Env)], job.Env()),
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	}
	pid, err := syscall.ForkExec(cmd.Path, cmd.Args, attr)
	if errors.Is(err, syscall.ENOEXEC) {
		// A script without a #! line: run it with /bin/sh as a POSIX shell
		// would, so legacy scripts work unchanged.
		args := append([]string{"/bin/sh", cmd.Path}, cmd.Args[1:]...)
		pid, err = syscall.ForkExec("/bin/sh", args, attr)
	}
	return pid, err
}

// Pid is the child's process id, which is also its process group id.
func (c *Child) Pid() int { return c.pid }

// Done is closed when the child itself has exited (others in its group may
// still run).
func (c *Child) Done() <-chan struct{} { return c.done }

// Signal sends sig to the child's process group; only while the child is
// not reaped, so the group id is still ours. The reaper is held off from
// the check to the signal: it closes done when it reaps the child.
func (c *Child) Signal(sig syscall.Signal) error {
	var err error
	HoldReaps(func() {
		select {
		case <-c.done:
		default:
			err = signals.Group(c.pid, sig)
		}
	})
	return err
}

// ExitCode is the child's status as a shell reports it: the exit code, or
// 128+N for a death by signal N. Valid after Done.
func (c *Child) ExitCode() int {
	if c.status.Signaled() {
		return exitcode.SignalBase + int(c.status.Signal())
	}
	return c.status.ExitStatus()
}

// Stopped hears of the signals that stop a child started in the terminal's
// foreground (Ctrl-Z); nil for any other child.
func (c *Child) Stopped() <-chan syscall.Signal { return c.stops }

// InterruptedAtTerminal reports whether the child was killed by SIGINT or
// SIGQUIT while its group was the terminal's foreground group: Ctrl-C or
// Ctrl-\ at the terminal, the operator's way to stop a foreground job.
// Valid after Done.
func (c *Child) InterruptedAtTerminal() (syscall.Signal, bool) {
	if !c.hadTerminal || !c.status.Signaled() {
		return 0, false
	}
	sig := c.status.Signal()
	return sig, sig == syscall.SIGINT || sig == syscall.SIGQUIT
}

// Describe says how the child ended, for logs.
func (c *Child) Describe() string {
	if c.status.Signaled() {
		return "killed by " + signals.Name(c.status.Signal())
	}
	return fmt.Sprintf("exited with code %d", c.status.ExitStatus())
}
