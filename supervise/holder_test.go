package supervise

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// waitingLocker never grants the key; Leader answers with leader(n) on its
// n-th call.
type waitingLocker struct {
	calls  atomic.Int32
	leader func(n int32) (locker.Holder, error)
}

func (l *waitingLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (l *waitingLocker) Leader(context.Context) (locker.Holder, error) {
	return l.leader(l.calls.Add(1))
}
func (l *waitingLocker) ReleaseHandle(context.Context, string) error { return nil }
func (l *waitingLocker) Close() error                                { return nil }

// runWaiting runs a supervisor on lk with a 1s acquire timeout and returns
// its exit code and log.
func runWaiting(t *testing.T, lk locker.Locker) (int, string) {
	t.Helper()
	var buf testsupport.SyncBuffer
	clock := newFakeClock() // the acquire timeout passes on it
	sh, _ := ResolveCommand("sh")
	s, err := New(Config{
		Locker: lk, Target: "10.0.0.1:2379", Command: Command{Path: sh, Args: []string{"sh", "-c", "true"}, Env: os.Environ()},
		TTL: 15 * time.Second, RenewInterval: 200 * time.Millisecond, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
		StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit,
		AcquireTimeout: time.Second, Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}),
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- s.Run(context.Background()) }()
	return advanceUntilDone(t, clock, done, 100*time.Millisecond), buf.String()
}

// TestAcquireTimeoutIsAConflictOnlyWithAHolderSeen: a holder read during the
// wait makes the timeout "held elsewhere" (124), even if the backend fails
// the last read; a backend that never named one is an outage (125), logged
// at WARN with its address and the last error.
func TestAcquireTimeoutIsAConflictOnlyWithAHolderSeen(t *testing.T) {
	// In parallel: no child, no box of a cgroup, no key, no freeze hook;
	// what it checks is the exit code and the log.
	t.Parallel()
	host, _ := os.Hostname()
	refused := errors.New("dial tcp 10.0.0.1:2379: connect: connection refused")
	seen := &waitingLocker{leader: func(n int32) (locker.Holder, error) {
		if n == 1 {
			return locker.Holder{ID: "other", Hostname: host + "-elsewhere", PID: 7, Epoch: 3}, nil
		}
		return locker.Holder{}, refused
	}}
	code, out := runWaiting(t, seen)
	if code != ExitNotHeld {
		t.Fatalf("holder seen during the wait: exit %d, want %d\n%s", code, ExitNotHeld, out)
	}
	if strings.Count(out, "waiting for the holder") != 1 || !strings.Contains(out, "holder=other host="+host+"-elsewhere pid=7 epoch=3") {
		t.Fatalf("want one line naming the holder waited for:\n%s", out)
	}

	never := &waitingLocker{leader: func(int32) (locker.Holder, error) { return locker.Holder{}, refused }}
	code, out = runWaiting(t, never)
	if code != ExitInternal {
		t.Fatalf("no holder ever seen: exit %d, want %d\n%s", code, ExitInternal, out)
	}
	if !strings.Contains(out, "[WARN]  not acquired within --acquire-timeout: the backend could not be reached: address=10.0.0.1:2379") ||
		!strings.Contains(out, "connection refused") || strings.Contains(out, "waiting for the holder") {
		t.Fatalf("want a WARN naming the address and the last error:\n%s", out)
	}
	// Reads: one at the start, then one a TTL (15s, so none in the 1s
	// wait), and the last one.
	if n := never.calls.Load(); n != 2 {
		t.Fatalf("%d holder reads in a 1s wait with a 15s TTL, want 2", n)
	}
}

// TestWaitingLineSaysNoEpochBeforeTheHolderHasOne: a holder read in the
// moment after it took the lock and before its epoch was granted (the
// local backend's pending record) has epoch 0, which no term has; the line
// naming it must not say "epoch=0".
func TestWaitingLineSaysNoEpochBeforeTheHolderHasOne(t *testing.T) {
	// In parallel: no child, no box of a cgroup, no key, no freeze hook;
	// what it checks is the exit code and the log.
	t.Parallel()
	host, _ := os.Hostname()
	pending := &waitingLocker{leader: func(int32) (locker.Holder, error) {
		return locker.Holder{ID: "other", Hostname: host + "-elsewhere", PID: 7}, nil
	}}
	_, out := runWaiting(t, pending)
	if !strings.Contains(out, "waiting for the holder: holder=other host="+host+"-elsewhere pid=7") || strings.Contains(out, "epoch=0") {
		t.Fatalf("want the holder named without epoch=0:\n%s", out)
	}
}
