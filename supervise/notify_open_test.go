package supervise

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
)

// countingLocker counts its campaigns and never wins.
type countingLocker struct {
	testLocker
	acquires atomic.Int32
}

func (l *countingLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	l.acquires.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A job whose notify socket cannot be made can never say it is ready or
// alive: with --ready-timeout or --job-watchdog it would be judged a
// zombie term after term, so leaderrun exits 125 before campaigning. With
// neither, the job runs without a socket, as before.
func TestUnmakeableNotifySocketWithRulesExits125(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sh, _ := ResolveCommand("sh")
	for _, c := range []struct {
		name  string
		rules NotifyConfig
		want  int
	}{
		{"watchdog", NotifyConfig{Watchdog: time.Second}, ExitInternal},
		{"ready-timeout", NotifyConfig{ReadyTimeout: time.Second}, ExitInternal},
		{"neither", NotifyConfig{}, -1}, // campaigns: cancelled below
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			l := &countingLocker{}
			notify := c.rules
			notify.Dir = notDir
			s, err := New(Config{
				Locker: l, Command: Command{Path: sh, Args: []string{"sh", "-c", "exit 0"}, Env: os.Environ()},
				TTL: 15 * time.Second, RenewInterval: 5 * time.Second, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
				StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit,
				Notify: notify, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan int, 1)
			go func() { done <- s.Run(ctx) }()
			if c.want >= 0 {
				select {
				case code := <-done:
					if code != c.want || l.acquires.Load() != 0 {
						t.Fatalf("exit %d after %d campaigns; want %d before any\n%s", code, l.acquires.Load(), c.want, logs.String())
					}
					if !strings.Contains(logs.String(), "--job-watchdog need the job's notify socket") {
						t.Errorf("the error does not name the flags:\n%s", logs.String())
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("Run did not return\n%s", logs.String())
				}
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for l.acquires.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			cancel(SignalCause{Signal: syscall.SIGTERM})
			<-done
			if l.acquires.Load() == 0 || !strings.Contains(logs.String(), "the job gets no notify socket") {
				t.Fatalf("without the rules the run must go on without a socket, said once:\n%s", logs.String())
			}
		})
	}
}
