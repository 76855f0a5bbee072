//go:build linux

package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main runs this process as the guard, whichever binary it is (the small
// leaderrun-guard, or leaderrun re-executed), and returns its exit code.
func Main(release Releaser, log Logger) int {
	// One thread runs Go code: the guard does little, and fewer threads
	// wake fewer times.
	runtime.GOMAXPROCS(1)
	// comm, as ps and pkill see it (the main thread's, /proc/PID/comm).
	_ = os.WriteFile("/proc/self/comm", []byte(Name), 0)
	// Only "done", end of input or SIGKILL end the guard: a signal meant for
	// leaderrun (pkill, a terminal's ^C) must not disarm it.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// The release command the guard may run must not inherit the reply pipe
	// or the lock.
	for _, fd := range []int{ReplyFD, HoldFD} {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	var reply io.Writer
	if _, err := unix.FcntlInt(ReplyFD, unix.F_GETFD, 0); err == nil {
		reply = os.NewFile(ReplyFD, "reply")
	}
	return Run(pollable(unix.Stdin, "stdin"), reply, release, log)
}

// pollable opens fd in non-blocking mode, so that a read waiting on it parks
// in the runtime's poller instead of holding a thread in read(2). A blocked
// read(2) keeps the runtime's monitor thread awake after every message (it
// polls every 20µs until it hands the processor off), tens of wake-ups a
// message; parked in the poller, the guard sleeps until a line or a timer.
// The descriptor is the guard's own end of its pipe: leaderrun writes
// through another open file, unaffected.
func pollable(fd int, name string) *os.File {
	_ = unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

// ReleaseRequest is what the guard writes on the stdin of the release
// command (`leaderrun __release`): the hello and lease messages.
func ReleaseRequest(hello []byte, handle string) string { return Hello(hello) + Lease(handle) }

// ReadReleaseRequest reads a ReleaseRequest.
func ReadReleaseRequest(r io.Reader) (hello []byte, handle string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case verbHello:
			hello = []byte(rest)
		case verbLease:
			handle = rest
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if hello == nil || handle == "" {
		return nil, "", errors.New("release request without hello or lease")
	}
	return hello, handle, nil
}

// StderrLogger is a minimal Logger for the small guard binary: one line a
// message on stderr, in hclog's text layout.
type StderrLogger struct{ Level string }

func (l StderrLogger) Info(msg string, args ...any) { l.log("INFO", msg, args) }
func (l StderrLogger) Warn(msg string, args ...any) { l.log("WARN", msg, args) }
func (l StderrLogger) Error(msg string, args ...any) {
	l.log("ERROR", msg, args)
}

func (l StderrLogger) log(level, msg string, args []any) {
	rank := map[string]int{"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4}
	if rank[level] < rank[strings.ToUpper(l.Level)] {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] leaderrun.guard: %s", level, msg)
	if len(args) > 0 {
		b.WriteString(":")
	}
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	b.WriteString("\n")
	_, _ = os.Stderr.WriteString(b.String())
}
