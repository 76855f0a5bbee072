package supervise

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// runTerm runs one term of script with hooks on the real clock and returns
// the exit code.
func runTerm(t *testing.T, script string, hooks TermHooks) (int, *testLease) {
	t.Helper()
	lease := newTestLease(1, 15*time.Second)
	lk := &testLocker{leases: make(chan *testLease, 1)}
	lk.leases <- lease
	sh, err := ResolveCommand("sh")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		Locker: lk, Command: Command{Path: sh, Args: []string{"sh", "-c", script}, Env: os.Environ()},
		TTL: 15 * time.Second, RenewInterval: 5 * time.Second, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
		StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit, Term: hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case code := <-done:
		return code, lease
	case <-time.After(20 * time.Second):
		t.Fatal("supervisor did not finish")
		return 0, nil
	}
}

func released(l *testLease) bool {
	select {
	case <-l.released:
		return true
	default:
		return false
	}
}

func TestTermSkippedBeforeStartRunsNoChild(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	afterRun := false
	code, lease := runTerm(t, "touch "+ran, TermHooks{
		BeforeStart: func(ctx context.Context, _ locker.Lease) (bool, string, int) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("BeforeStart's ctx has no deadline")
			}
			return true, "slot already ran", 7
		},
		AfterRun: func(context.Context, locker.Lease, bool) { afterRun = true },
	})
	if code != 7 {
		t.Fatalf("exit %d, want the hook's 7", code)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the child ran although BeforeStart skipped the term")
	}
	if !released(lease) {
		t.Fatal("a skipped term kept its lease")
	}
	if afterRun {
		t.Fatal("AfterRun called for a term without a child")
	}
}

func TestTermAfterRunComesBeforeRelease(t *testing.T) {
	cases := []struct {
		script    string
		code      int
		succeeded bool
	}{
		{"exit 0", 0, true},
		{"exit 3", 3, false},
	}
	for _, c := range cases {
		t.Run(c.script, func(t *testing.T) {
			calls := 0
			var got, releasedFirst bool
			var lease *testLease
			var code int
			code, lease = runTerm(t, c.script, TermHooks{
				BeforeStart: func(context.Context, locker.Lease) (bool, string, int) { return false, "", 0 },
				AfterRun: func(_ context.Context, l locker.Lease, succeeded bool) {
					calls++
					got = succeeded
					releasedFirst = released(l.(*testLease))
				},
			})
			if code != c.code || calls != 1 || got != c.succeeded || releasedFirst {
				t.Fatalf("exit %d, AfterRun calls %d succeeded=%v released before it=%v; want exit %d, 1 call, succeeded=%v, not released",
					code, calls, got, releasedFirst, c.code, c.succeeded)
			}
			if !released(lease) {
				t.Fatal("lease not released after AfterRun")
			}
		})
	}
}
