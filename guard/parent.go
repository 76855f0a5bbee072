//go:build linux

package guard

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exitTimeout bounds the wait for the guard to exit after "done".
const exitTimeout = 2 * time.Second

// deliverTimeout bounds the delivery of a guard's first messages (hello,
// lease, hold), which Start writes whole, waiting for the guard to read
// what its pipe cannot hold.
const deliverTimeout = 5 * time.Second

// pipeBuf is Linux's PIPE_BUF: a write of at most this many bytes to a
// pipe is atomic, all of it or none.
const pipeBuf = 4096

// Spec says how to start the guard process.
type Spec struct {
	// Path, Args and Env run the guard: the leaderrun-guard binary, or
	// leaderrun itself re-executed. Args[0] should be Name.
	Path string
	Args []string
	Env  []string
	// Hello is the guard's first message: how to reach the backend to
	// release the lease.
	Hello []byte
}

// Starter forks a process and arranges for done to receive its exit
// status; the supervisor's reaper provides it, as the one place that waits
// for children.
type Starter func(fork func() (int, error), done func(syscall.WaitStatus)) (int, error)

// Process is the supervisor's end of one guard: a pipe it writes without
// ever blocking, the guard's answers, and its exit.
type Process struct {
	pid      int
	fd       int // write end of the guard's stdin, non-blocking
	exited   chan struct{}
	fired    chan struct{}
	released chan struct{}
	replies  chan struct{} // closed when the reply reader ends
	log      Logger
	broken   bool

	// The reply pipe is read by a goroutine (which closes the channels
	// above) and by HasFired, in the caller's goroutine; mu orders them.
	mu       sync.Mutex
	rfd      int    // read end of the reply pipe, non-blocking
	ended    bool   // end of the reply pipe seen: rfd is no longer read
	partial  []byte // a reply line not yet complete
	hasFired bool
	hasRel   bool
}

// Start starts a guard for one leadership term and tells it the lease.
// hold, if not nil, is the local lock file: the guard gets a duplicate of
// its descriptor and keeps it until the job is gone. The guard leads its
// own process group (terminal signals meant for leaderrun do not reach it)
// and has no PDEATHSIG: it must outlive a dead leaderrun.
func Start(spec *Spec, handle string, hold *os.File, start Starter, log Logger) (*Process, error) {
	var in, out [2]int
	// O_CLOEXEC everywhere: the child must never hold the write end, or the
	// guard would not see leaderrun's death as end of input.
	if err := unix.Pipe2(in[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	if err := unix.Pipe2(out[:], unix.O_CLOEXEC); err != nil {
		unix.Close(in[0])
		unix.Close(in[1])
		return nil, err
	}
	closeAll := func(fds ...int) {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if err := unix.SetNonblock(in[1], true); err != nil {
		closeAll(in[0], in[1], out[0], out[1])
		return nil, err
	}
	// Non-blocking, so HasFired can read it without waiting.
	if err := unix.SetNonblock(out[0], true); err != nil {
		closeAll(in[0], in[1], out[0], out[1])
		return nil, err
	}
	files := []uintptr{uintptr(in[0]), 1, 2, uintptr(out[1])}
	if hold != nil {
		files = append(files, hold.Fd())
	}
	p := &Process{fd: in[1], rfd: out[0], exited: make(chan struct{}), fired: make(chan struct{}), released: make(chan struct{}), replies: make(chan struct{}), log: log}
	attr := &syscall.ProcAttr{
		Env:   spec.Env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	pid, err := start(func() (int, error) {
		return syscall.ForkExec(spec.Path, spec.Args, attr)
	}, func(syscall.WaitStatus) { close(p.exited) })
	closeAll(in[0], out[1])
	if err != nil {
		closeAll(in[1], out[0])
		return nil, err
	}
	p.pid = pid
	go p.readReplies(os.NewFile(uintptr(out[0]), "guard replies"))
	first := Hello(spec.Hello) + Lease(handle)
	if hold != nil {
		first += Hold(HoldFD)
	}
	if err := p.deliver([]byte(first), time.Now().Add(deliverTimeout)); err != nil {
		p.Kill()
		return nil, fmt.Errorf("hand the guard its hello (%d bytes): %w", len(first), err)
	}
	return p, nil
}

// deliver writes a guard's first messages whole, whatever their size (a
// hello carries a kubeconfig's CA bundle, say): what the pipe cannot hold
// waits, until deadline, for the guard to read. Messages larger than the
// pipe's atomic size then wait until the guard has read them all, so that
// the term's messages, each written at once without blocking (send), find
// the pipe empty.
func (p *Process) deliver(msg []byte, deadline time.Time) error {
	if len(msg) > MaxMessage {
		return fmt.Errorf("more than the %d bytes a message may have", MaxMessage)
	}
	large := len(msg) > pipeBuf
	for len(msg) > 0 {
		n, err := unix.Write(p.fd, msg)
		if n > 0 {
			msg = msg[n:]
		}
		switch {
		case err == nil, errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			if err := p.waitPipe(deadline, func() bool {
				fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLOUT}}
				n, _ := unix.Poll(fds, 10)
				return n > 0
			}); err != nil {
				return err
			}
		default:
			return err
		}
	}
	if !large {
		return nil
	}
	return p.waitPipe(deadline, func() bool {
		// FIONREAD (TIOCINQ's number): the bytes the guard has not read.
		unread, err := unix.IoctlGetInt(p.fd, unix.TIOCINQ)
		if err != nil || unread == 0 {
			return true
		}
		time.Sleep(time.Millisecond)
		return false
	})
}

// waitPipe calls ready until it says true, and fails once deadline passed
// or the guard exited.
func (p *Process) waitPipe(deadline time.Time, ready func() bool) error {
	for !ready() {
		if isClosed(p.exited) {
			return errors.New("the guard exited")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guard did not read it within %v", deliverTimeout)
		}
	}
	return nil
}

// readReplies turns the guard's answers into channel closes as they come.
// It ends when the guard exits (end of its reply pipe).
func (p *Process) readReplies(f *os.File) {
	defer close(p.replies)
	defer f.Close()
	if rc, err := f.SyscallConn(); err == nil {
		// Called again each time the pipe is readable, until it ends.
		_ = rc.Read(func(uintptr) bool { return p.drain() })
	}
	// Should the runtime's poller refuse the pipe, wait in poll(2).
	for !p.drain() {
		fds := []unix.PollFd{{Fd: int32(p.rfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
}

// drain reads whatever the guard has written so far, without blocking, and
// reports whether the pipe ended.
func (p *Process) drain() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf [256]byte
	for !p.ended {
		n, err := unix.Read(p.rfd, buf[:])
		switch {
		case n > 0:
			p.take(buf[:n])
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return false
		default: // end of the pipe: the guard exited
			p.ended = true
		}
	}
	return true
}

// take handles the complete reply lines in b.
func (p *Process) take(b []byte) {
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return
		}
		line := string(p.partial[:i])
		p.partial = p.partial[i+1:]
		switch line {
		case verbFired:
			p.markFired()
		case verbReleased:
			// Only a guard that fired releases.
			p.markFired()
			if !p.hasRel {
				p.hasRel = true
				close(p.released)
			}
		}
	}
}

func (p *Process) markFired() {
	if !p.hasFired {
		p.hasFired = true
		close(p.fired)
	}
}

// Pid is the guard's process id.
func (p *Process) Pid() int { return p.pid }

// Exited is closed when the guard process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Released is closed when the guard reports it released the lease.
func (p *Process) Released() <-chan struct{} { return p.released }

// Fired is closed when the guard reports its kill point passed: it kills
// the job and releases the lease, and the term is over.
func (p *Process) Fired() <-chan struct{} { return p.fired }

// HasFired reads, in the caller's goroutine and without blocking, all that
// the guard has written so far, and reports whether it said "fired". The
// guard says it before it kills, so a supervisor that saw the job die, or
// a renewal answered, after the guard fired learns it here before it acts
// on either: unlike Fired, no goroutine has to have run first.
func (p *Process) HasFired() bool {
	p.drain()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hasFired
}

// Watch hands the guard a new run of the job and its kill point.
func (p *Process) Watch(killAt int64, j Job) { p.send(Watch(killAt, j)) }

// Extend moves the guard's kill point.
func (p *Process) Extend(killAt int64) { p.send(Extend(killAt)) }

// Gone tells the guard the job is gone.
func (p *Process) Gone() { p.send(Gone()) }

// Stop tells the guard its term is over and waits for it to exit.
func (p *Process) Stop() {
	p.send(Done())
	unix.Close(p.fd)
	t := time.NewTimer(exitTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		// Nothing is at risk: the term is over and its job gone. A guard
		// that fired may still wait on a frozen backend for its release;
		// the lease then ends at its TTL as after any crash.
		p.log.Warn("the guard did not exit within 2s of the term's end (a release of its own may be waiting on the backend); killing it", "pid", p.pid)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.exited
	}
	<-p.replies
}

// Kill ends a guard whose term never began (or that must be replaced).
func (p *Process) Kill() {
	unix.Close(p.fd)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.exited
	<-p.replies
}

// send writes one message without blocking: a guard that stopped reading
// must not stall the supervisor, whose own timeline still protects the lease.
// Nor may it lose a message: a kill point or a new run it never read would
// leave it acting on an old one (firing at a kill point long past, or
// killing a run that ended and releasing while the current one lives). So a
// guard whose pipe is full is killed; the supervisor's reaper sees it exit
// and starts another, handed the running job, as for any guard that died
// (DESIGN §1.9). The local lock stays held: leaderrun's descriptor of it
// is still open.
func (p *Process) send(msg string) {
	if p.broken {
		return
	}
	n, err := unix.Write(p.fd, []byte(msg))
	if err == nil && n < len(msg) {
		// Part of a message is no message: the guard would read it run
		// into the next one.
		err = unix.EAGAIN
	}
	switch {
	case err == nil:
	case errors.Is(err, unix.EAGAIN):
		p.broken = true
		p.log.Error("the guard takes no more messages (its pipe is full); killing it so that another one takes over", "pid", p.pid)
		if !isClosed(p.exited) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	default:
		p.broken = errors.Is(err, syscall.EPIPE)
		p.log.Error("cannot reach the guard", "error", err)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
