//go:build linux

package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// ProcSpec says how to start a process.
type ProcSpec struct {
	// Name is for messages.
	Name string
	// Path and Args run it; Args excludes the program name.
	Path string
	Args []string
	// Env is added to a cleaned copy of the test's environment.
	Env []string
	// LogPath receives its standard output and error (appended).
	LogPath string
	// KeepLines keeps every output line with the time it arrived.
	KeepLines bool
}

// Line is one line of a process's output and when it was read.
type Line struct {
	At   fence.Mono
	Text string
}

// Proc is a process the suite or the benchmark started: a leaderrun, or a
// rival lock tool. It leads its own process group, and the kernel kills it
// if the test process dies.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	status  syscall.WaitStatus

	mu    sync.Mutex
	lines []Line
	read  chan struct{} // closed when the output reader ended; nil without KeepLines
}

// Start starts a process.
func Start(spec ProcSpec) (*Proc, error) {
	f, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "==== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), spec.Path, strings.Join(spec.Args, " "))
	p := &Proc{Name: spec.Name, LogPath: spec.LogPath, done: make(chan struct{})}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(cleanEnv(), spec.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var r, w *os.File
	if spec.KeepLines {
		// A pipe of our own: its write end is an *os.File, so Wait does not
		// wait for the children that inherit it, and the reader sees every
		// line until the last of them is gone.
		if r, w, err = os.Pipe(); err != nil {
			f.Close()
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = w, w
	} else {
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		if r != nil {
			r.Close()
			w.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p.cmd = cmd
	if r != nil {
		w.Close()
		p.read = make(chan struct{})
		go p.readLines(r, f)
	} else {
		f.Close()
	}
	go func() {
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			p.status = ws
		}
		close(p.done)
	}()
	return p, nil
}

// cleanEnv is the test's environment without variables that would change
// what leaderrun, the rival tools or the writer do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "LEADERRUN_"), strings.HasPrefix(name, "LEADER_"),
			strings.HasPrefix(name, "CONSUL_"), strings.HasPrefix(name, "ETCD"),
			strings.HasPrefix(name, "FENCE_"), name == "NOTIFY_SOCKET", strings.HasPrefix(name, "WATCHDOG_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (p *Proc) readLines(r io.ReadCloser, log *os.File) {
	defer close(p.read)
	defer log.Close()
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		at := fence.Now()
		text := sc.Text()
		p.mu.Lock()
		p.lines = append(p.lines, Line{At: at, Text: text})
		p.mu.Unlock()
		fmt.Fprintln(log, text)
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool { return testsupport.IsClosed(p.done) }

// Code is the exit status as a shell reports it (128+N for signal N);
// valid once Done is closed.
func (p *Proc) Code() int {
	if p.status.Signaled() {
		return 128 + int(p.status.Signal())
	}
	return p.status.ExitStatus()
}

// Signal sends sig to the process itself (not its group).
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	err := syscall.Kill(p.Pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Wait waits up to timeout for the process to exit; ok is false if it did
// not.
func (p *Proc) Wait(timeout time.Duration) (code int, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Code(), true
	case <-t.C:
		return 0, false
	}
}

// Kill SIGKILLs the process and waits for it.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Lines returns the output lines read so far (KeepLines only).
func (p *Proc) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.lines...)
}

// Output is the process's log file so far, at most the last max bytes.
func (p *Proc) Output(max int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
