package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The reaper and the signal handler serve the whole process.
		goleak.IgnoreTopFunction("github.com/leaderrun/leaderrun/internal/reap.(*Reaper).loop"),
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
		goleak.IgnoreTopFunction("os/signal.loop"),
	)
}

// testLocker hands out one testLease per Acquire.
type testLocker struct {
	leases chan *testLease
}

func (l *testLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	select {
	case lease := <-l.leases:
		return lease, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (l *testLocker) Leader(context.Context) (locker.Holder, error) {
	return locker.Holder{}, locker.ErrNoLeader
}
func (l *testLocker) ReleaseHandle(context.Context, string) error { return nil }
func (l *testLocker) Close() error                                { return nil }

// testLease renews while healthy is set; a renewal can be held in flight by
// the test through gate.
type testLease struct {
	epoch    uint64
	ttl      time.Duration
	healthy  atomic.Bool
	gate     chan struct{} // when non-nil, Renew waits for it
	renews   atomic.Int32
	lostOnce sync.Once
	lost     chan struct{}
	released chan struct{}
}

func newTestLease(epoch uint64, ttl time.Duration) *testLease {
	l := &testLease{epoch: epoch, ttl: ttl, lost: make(chan struct{}), released: make(chan struct{})}
	l.healthy.Store(true)
	return l
}

func (l *testLease) Epoch() uint64 { return l.epoch }
func (l *testLease) Renew(ctx context.Context) (time.Duration, error) {
	n := l.renews.Add(1)
	if l.gate != nil && n > 1 { // the first renewal confirms the lease
		<-l.gate
	}
	if !l.healthy.Load() {
		return 0, errors.New("backend unreachable")
	}
	return l.ttl, nil
}
func (l *testLease) Lost() <-chan struct{} { return l.lost }
func (l *testLease) LostReason() string    { return "test said so" }
func (l *testLease) Handle() string        { return "test" }
func (l *testLease) Release(context.Context) error {
	close(l.released)
	return nil
}
func (l *testLease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// event is something the supervisor did, stamped with the fake time.
type event struct {
	at   time.Time
	what string
}

type recorder struct {
	mu     sync.Mutex
	clock  Clock
	events []event
	ticks  atomic.Int64
}

func (r *recorder) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{r.clock.Now(), what})
}

func (r *recorder) find(what string) (event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.what == what {
			return e, true
		}
	}
	return event{}, false
}

func (r *recorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if strings.HasPrefix(e.what, prefix) {
			n++
		}
	}
	return n
}

func (r *recorder) events_() Events {
	return Events{
		ChildStarted:   func(int) { r.add("started") },
		ChildSignalled: func(sig syscall.Signal) { r.add(sig.String()) },
		Stopping:       func(reason string, lost bool) { r.add("stopping") },
		Released:       func() { r.add("released") },
		ChildExited:    func(code int) { r.add("exited " + strconv.Itoa(code)) },
		Renewed:        func(time.Time) { r.add("renewed") },
	}
}

// withTicks watches the heartbeat (Events.Tick): the event loop then turns
// every HeartbeatInterval, as under a systemd watchdog, and r counts the
// turns. Without it the loop turns only on events, as in a run without a
// watchdog, and fake time skips straight to the next timer.
func (r *recorder) withTicks(c *Config) { c.Events.Tick = func() { r.ticks.Add(1) } }

// harness runs a supervisor with a fake clock over a real child.
func harness(t *testing.T, script string, lease *testLease, change ...func(*Config)) (*fakeClock, *recorder, <-chan int) {
	t.Helper()
	return harnessWith(t, &recorder{clock: newFakeClock()}, script, lease, change...)
}

// harnessWith is harness with a recorder of the caller's, on its clock.
func harnessWith(t *testing.T, rec *recorder, script string, lease *testLease, change ...func(*Config)) (*fakeClock, *recorder, <-chan int) {
	t.Helper()
	clock := rec.clock.(*fakeClock)
	lk := &testLocker{leases: make(chan *testLease, 1)}
	lk.leases <- lease
	sh, err := ResolveCommand("sh")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Locker:        lk,
		Command:       Command{Path: sh, Args: []string{"sh", "-c", script}, Env: os.Environ()},
		TTL:           15 * time.Second,
		RenewInterval: 5 * time.Second,
		KillGrace:     5 * time.Second,
		SafetyMargin:  time.Second,
		StopSignal:    syscall.SIGTERM,
		RestartDelay:  time.Second,
		Restart:       RestartNever,
		OnLost:        LostExit,
		Clock:         clock,
		Events:        rec.events_(),
	}
	// A cgroup, where there is one, keeps the job's sweep cheap enough for
	// settle's idea of "idle" (package contain tests both modes).
	if box, err := contain.Open(contain.Auto, contain.Options{}); err == nil {
		cfg.Contain = box
		t.Cleanup(func() { _ = box.Close() })
	}
	for _, f := range change {
		f(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- s.Run(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for rec.count("started") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("child never started")
		}
		time.Sleep(time.Millisecond)
	}
	return clock, rec, done
}

func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStopTimelineOnFailedRenewals: renewals fail from the start, so the
// lease deadline is the confirm's send time + TTL. A child that ignores
// SIGTERM gets it at deadline - margin - grace and SIGKILL at deadline -
// margin, on the injected clock; the group is dead and the exit code is 123.
func TestStopTimelineOnFailedRenewals(t *testing.T) {
	dir := t.TempDir()
	lease := newTestLease(7, 15*time.Second)
	script := "trap '' TERM; sleep 1000 & echo $! > " + dir + "/gc; wait"
	clock, rec, done := harness(t, script, lease)
	t0 := clock.Now() // the confirm renewal was sent at t0: deadline t0+15s
	gc := readPIDFile(t, filepath.Join(dir, "gc"))
	lease.healthy.Store(false)

	var code int
	finished := false
	// Steps of a second land on both stop points; the failed renewals are
	// retried every 250ms and the job is polled every 10ms while it is
	// stopped, so every step settles, and smaller steps only cost real
	// time.
	for !finished && clock.Now().Sub(t0) < 20*time.Second {
		clock.Step(t, time.Second, t0.Add(20*time.Second))
		select {
		case code = <-done:
			finished = true
		default:
		}
	}
	if !finished {
		select {
		case code = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("supervisor did not finish")
		}
	}
	term, ok := rec.find(syscall.SIGTERM.String())
	if !ok {
		t.Fatal("no SIGTERM sent")
	}
	kill, ok := rec.find(syscall.SIGKILL.String())
	if !ok {
		t.Fatal("no SIGKILL sent")
	}
	if got := term.at.Sub(t0); got != 9*time.Second {
		t.Errorf("SIGTERM at t0+%v, want t0+9s (deadline 15s - margin 1s - grace 5s)", got)
	}
	if got := kill.at.Sub(t0); got != 14*time.Second {
		t.Errorf("SIGKILL at t0+%v, want t0+14s (deadline 15s - margin 1s)", got)
	}
	if code != ExitLost {
		t.Errorf("exit code %d, want %d", code, ExitLost)
	}
	if signals.ProcessAlive(gc) {
		t.Error("grandchild survived the stop")
	}
	if _, ok := rec.find("released"); !ok {
		t.Error("leadership not released after the group was gone")
	}
}

// TestLateRenewalDoesNotRestartChild: a renewal in flight when the backend
// reports the loss succeeds afterwards; the child must stay stopped.
func TestLateRenewalDoesNotRestartChild(t *testing.T) {
	lease := newTestLease(3, 15*time.Second)
	lease.gate = make(chan struct{})
	rec := &recorder{clock: newFakeClock()}
	clock, rec, done := harnessWith(t, rec, "exec sleep 1000", lease, rec.withTicks)
	clock.Settle(t)
	clock.Advance(5 * time.Second) // the renewal goes out and hangs in the gate
	clock.Settle(t)
	lease.markLost()
	deadline := time.Now().Add(10 * time.Second)
	for rec.count("stopping") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no stop after loss")
		}
		time.Sleep(time.Millisecond)
	}
	ticksAtLoss := rec.ticks.Load()
	close(lease.gate) // the late renewal now succeeds
	select {
	case code := <-done:
		if code != ExitLost {
			t.Errorf("exit code %d, want %d", code, ExitLost)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("supervisor did not finish")
	}
	if n := rec.count("started"); n != 1 {
		t.Errorf("child started %d times, want 1", n)
	}
	// The stop takes a few group polls; a loop spinning on the closed Lost
	// channel would turn hundreds of thousands of times.
	if n := rec.ticks.Load() - ticksAtLoss; n > 1000 {
		t.Errorf("event loop turned %d times while stopping: spinning", n)
	}
	if n := rec.count("exited"); n != 1 {
		t.Errorf("child exit reported %d times, want 1", n)
	}
}

// TestRenewalsKeepChildRunning: healthy renewals move the deadline, so no
// signal is sent however long the child runs.
func TestRenewalsKeepChildRunning(t *testing.T) {
	lease := newTestLease(1, 15*time.Second)
	clock, rec, done := harness(t, "exec sleep 1000", lease)
	for end := clock.Now().Add(time.Minute); clock.Now().Before(end); { // four TTLs
		clock.Step(t, 500*time.Millisecond, end)
	}
	if n := rec.count("SIG"); n != 0 {
		t.Fatalf("%d signals sent to a child whose lease was renewed", n)
	}
	lease.markLost()
	if code := <-done; code != ExitLost {
		t.Fatalf("exit code %d, want %d", code, ExitLost)
	}
}

// startTimes lists the fake times at which the child started.
func (r *recorder) startTimes() []time.Time { return r.times("started") }

// times lists the fake times of the events starting with prefix.
func (r *recorder) times(prefix string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, e := range r.events {
		if strings.HasPrefix(e.what, prefix) {
			out = append(out, e.at)
		}
	}
	return out
}

// TestRestartBackoffDoublesAndResetsAfterALongRun: --restart on-failure
// waits 1s, 2s, 4s between crashing runs, and starts over at 1s after a
// run that lasted longer than the largest delay.
func TestRestartBackoffDoublesAndResetsAfterALongRun(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	// Runs 1-3 and 5 fail at once; run 4 lasts until the test kills it.
	script := "echo x >> " + runs + "; [ $(wc -l < " + runs + ") -eq 4 ] && { echo $$ > " + dir + "/long.pid; exec sleep 1000; }; exit 1"
	// Renewals every 20s: fewer turns to wait out during the long run.
	lease := newTestLease(1, time.Minute)
	clock, rec, done := harness(t, script, lease, func(c *Config) {
		c.Restart, c.TTL, c.RenewInterval = RestartOnFailure, time.Minute, 20*time.Second
	})
	// restarted waits for run n to end and for the restart due want after
	// its exit. The runs that fail end at once, and a killed one as soon as
	// it is reaped, with the fake clock still: nothing real is left
	// pending once the exit is reported, so time moves on at once to the
	// step before the restart is due (a timer due sooner still fires on
	// its step). From there it moves step by step, skipping nothing, as
	// the next run is forked in real time while the clock moves, and the
	// next timer may be a renewal seconds away.
	restarted := func(n int, want time.Duration) {
		t.Helper()
		waitUntil(t, "run "+strconv.Itoa(n)+" to exit", func() bool { return len(rec.times("exited")) >= n })
		exit := rec.times("exited")[n-1]
		for idle := exit.Add(want - 100*time.Millisecond); clock.Now().Before(idle); {
			clock.Step(t, 100*time.Millisecond, idle)
		}
		for len(rec.startTimes()) <= n {
			if late := MaxRestartDelay + want; clock.Now().Sub(exit) > late {
				t.Fatalf("run %d not started by %v after run %d exited, want %v", n+1, late, n, want)
			}
			clock.Settle(t)
			clock.Advance(100 * time.Millisecond)
		}
	}
	restarted(1, time.Second)
	restarted(2, 2*time.Second)
	restarted(3, 4*time.Second)
	long := readPIDFile(t, filepath.Join(dir, "long.pid"))
	// A healthy run: nothing real happens until the test kills it, so the
	// steps between renewals can be skipped.
	for end := clock.Now().Add(35 * time.Second); clock.Now().Before(end); {
		clock.Step(t, 100*time.Millisecond, end)
	}
	_ = syscall.Kill(long, syscall.SIGKILL)
	restarted(4, time.Second)
	restarted(5, 2*time.Second)
	starts, exits := rec.startTimes(), rec.times("exited")
	// Each restart is due its delay after the exit it follows, never
	// sooner. It may come later in fake time: the fake clock moves on while
	// the real child is forked, which on a loaded machine takes several
	// 100ms steps. Below twice the delay still tells a doubled delay, and
	// one started over, from the next step.
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, time.Second, 2 * time.Second} {
		if got := starts[i+1].Sub(exits[i]); got < want || got >= 2*want {
			t.Errorf("restart %d came %v after the exit, want %v", i+1, got, want)
		}
	}
	lease.markLost()
	// The stop polls the job on the fake clock.
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
}
