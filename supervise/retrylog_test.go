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

// failingLocker fails every Acquire with the same error.
type failingLocker struct{ calls atomic.Int32 }

func (l *failingLocker) Acquire(context.Context) (locker.Lease, error) {
	l.calls.Add(1)
	return nil, errors.New("dial tcp 10.0.0.1:2379: connect: connection refused")
}
func (l *failingLocker) Leader(context.Context) (locker.Holder, error) {
	return locker.Holder{}, locker.ErrNoLeader
}
func (l *failingLocker) ReleaseHandle(context.Context, string) error { return nil }
func (l *failingLocker) Close() error                                { return nil }

// TestRepeatedCampaignFailureWarnsOnce: a backend that fails every
// attempt with the same error is a WARN once, then INFO, so that a quiet
// cron job waiting --acquire-timeout 2h mails the first failure and the
// verdict, not a line every 10s.
func TestRepeatedCampaignFailureWarnsOnce(t *testing.T) {
	// In parallel: a supervisor in group mode of its own, no cgroup, no key,
	// no freeze hook, and nothing timed on the fake clock that a busy
	// machine could make late.
	t.Parallel()
	var buf testsupport.SyncBuffer
	clock := newFakeClock()
	sh, _ := ResolveCommand("sh")
	lk := &failingLocker{}
	s, err := New(Config{
		Locker: lk, Target: "10.0.0.1:2379", Command: Command{Path: sh, Args: []string{"sh", "-c", "true"}, Env: os.Environ()},
		TTL: 15 * time.Second, RenewInterval: 200 * time.Millisecond, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
		StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit,
		AcquireTimeout: 30 * time.Second, Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}),
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- s.Run(context.Background()) }()
	code := advanceUntilDone(t, clock, done, 100*time.Millisecond)
	out := buf.String()
	if code != ExitInternal {
		t.Fatalf("exit %d, want %d\n%s", code, ExitInternal, out)
	}
	if n := lk.calls.Load(); n < 4 {
		t.Fatalf("%d attempts in 30s, want several", n)
	}
	if n := strings.Count(out, "campaign failed, retrying"); n != 1 {
		t.Errorf("%d WARN lines for %d attempts failing alike, want 1:\n%s", n, lk.calls.Load(), out)
	}
	if !strings.Contains(out, "not acquired within --acquire-timeout") {
		t.Errorf("no verdict at WARN:\n%s", out)
	}
}
