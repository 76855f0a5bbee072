package testsupport

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// PollInterval is how often WaitFor looks again.
const PollInterval = 10 * time.Millisecond

// WaitFor polls cond until it holds, or fails the test once timeout has
// passed, naming what it waited for. Tests wait for conditions this way,
// never with a bare sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}

// ExitStatus is the status of a finished exec.Cmd as a shell reports it:
// 0, the exit code, 128+N for a death by signal N, or -1 when the process
// could not be run or waited for.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// IsClosed reports whether ch is closed, without waiting.
func IsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Growing reports whether file grows within d: the heartbeat of a program
// such as ForkRelay, whose processes are too short-lived to be watched.
func Growing(file string, d time.Duration) bool {
	size := func() int64 {
		fi, err := os.Stat(file)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	before := size()
	time.Sleep(d)
	return size() != before
}
