package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// waitUntil polls cond in real time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// advanceUntilDone moves fake time in steps until the supervisor returns.
func advanceUntilDone(t *testing.T, clock *fakeClock, done <-chan int, step time.Duration) int {
	t.Helper()
	for range 2000 {
		select {
		case code := <-done:
			return code
		default:
		}
		clock.Step(t, step, time.Time{})
	}
	t.Fatal("supervisor did not finish")
	return 0
}

func TestSafetyMarginMustBePositive(t *testing.T) {
	cfg := Config{TTL: 15 * time.Second, RenewInterval: 5 * time.Second, KillGrace: 5 * time.Second,
		SafetyMargin: 0, StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit}
	err := cfg.ValidateOptions()
	if err == nil || !strings.Contains(err.Error(), "SafetyMargin") {
		t.Fatalf("--safety-margin 0 accepted (err %v)", err)
	}
}

// shrinkingLease grants the full TTL once (the confirm), then a shorter one.
type shrinkingLease struct {
	*testLease
	mu    sync.Mutex
	calls int
	sent  []time.Time
	clock Clock
	hold  func(n int) // called inside Renew n (1-based)
	grant func(n int) time.Duration
	fail  func(n int) error // Renew n's error, when not nil
}

func (l *shrinkingLease) Renew(ctx context.Context) (time.Duration, error) {
	l.mu.Lock()
	l.calls++
	n := l.calls
	l.sent = append(l.sent, l.clock.Now())
	l.mu.Unlock()
	if l.hold != nil {
		l.hold(n)
	}
	if l.fail != nil {
		if err := l.fail(n); err != nil {
			return 0, err
		}
	}
	return l.grant(n), nil
}

func (l *shrinkingLease) sends() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.sent...)
}

// A renewal that is granted a shorter TTL than before moves the deadline
// EARLIER: the backend will expire the lease on that TTL (DESIGN §1.6).
func TestShorterGrantedTTLMovesTheDeadlineEarlier(t *testing.T) {
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 1 {
				return 15 * time.Second
			}
			return 8 * time.Second
		},
		// Later renewals fail: the 8s grant's deadline stands.
		fail: func(n int) error {
			if n > 2 {
				return errors.New("backend unreachable")
			}
			return nil
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "trap '' TERM; exec sleep 1000")
	t0 := clock.Now()
	// Steps of 250ms up to the stop signal, whose time is what this test
	// reads; then the job is polled every 10ms through the kill grace, so
	// that no step is skipped: steps of a second keep it short in real
	// time.
	for rec.count(syscall.SIGTERM.String()) == 0 && clock.Now().Sub(t0) < 20*time.Second {
		clock.Step(t, 250*time.Millisecond, t0.Add(20*time.Second))
	}
	code := advanceUntilDone(t, clock, done, time.Second)
	term, ok := rec.find(syscall.SIGTERM.String())
	if !ok {
		t.Fatal("no SIGTERM")
	}
	// The renewal sent at t0+5s grants 8s: deadline t0+13s, stop signal 6s
	// (margin 1s + grace 5s) before it, at t0+7s, before the next renewal.
	// Ignoring the shorter grant would keep the confirm's t0+15s deadline
	// and signal at t0+9s, on a lease the backend no longer grants.
	// Recorded times run late by how long the loop took to react; 9s is
	// what ignoring the shorter grant gives.
	if got := term.at.Sub(t0); got < 7*time.Second || got >= 9*time.Second {
		t.Errorf("SIGTERM at t0+%v, want t0+7s: the shorter granted TTL must rule (renewals sent %v, t0 %v)", got, lease.sends(), t0)
	}
	if code != ExitLost {
		t.Errorf("exit %d, want %d", code, ExitLost)
	}
}

// Renewals are spaced by the interval from send to send: a slow round trip
// does not push the next renewal later.
func TestRenewalsDoNotDriftByTheRoundTrip(t *testing.T) {
	clock := newFakeClock()
	slow := make(chan struct{})
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(int) time.Duration { return 15 * time.Second },
		hold: func(n int) {
			if n == 2 {
				<-slow // the second renewal takes 2s of fake time
			}
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "exec sleep 1000")
	t0 := stepFor(t, clock, 5*time.Second, 100*time.Millisecond)
	waitUntil(t, "the second renewal", func() bool { return len(lease.sends()) >= 2 })
	clock.Settle(t)
	clock.Advance(2 * time.Second)
	close(slow)
	for len(lease.sends()) < 3 && clock.Now().Sub(t0) < 20*time.Second {
		clock.Step(t, 100*time.Millisecond, t0.Add(20*time.Second))
	}
	s := lease.sends()
	if len(s) < 3 {
		t.Fatalf("only %d renewals", len(s))
	}
	if got := s[2].Sub(s[1]); got != 5*time.Second {
		t.Errorf("renewals %v apart after a 2s round trip, want the 5s interval from send to send", got)
	}
	lease.markLost()
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
}

// A grant too short for the next renewal to come before the stop signal
// brings that renewal forward (the harness: TTL 15s, interval 5s, grace
// 5s, margin 1s, renewal timeout 1.5s): a renewal sent at s and granted 8s
// is followed by one at s+0.5s, not s+5s, and the child keeps running.
func TestShortGrantBringsTheNextRenewalForward(t *testing.T) {
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 2 {
				return 8 * time.Second
			}
			return 15 * time.Second
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "exec sleep 1000")
	t0 := clock.Now()
	for len(lease.sends()) < 4 && clock.Now().Sub(t0) < 20*time.Second {
		clock.Step(t, 50*time.Millisecond, t0.Add(20*time.Second))
	}
	s := lease.sends()
	if len(s) < 4 {
		t.Fatalf("only %d renewals", len(s))
	}
	if got := s[2].Sub(s[1]); got != 500*time.Millisecond {
		t.Errorf("renewal after an 8s grant came %v after it, want 500ms (8s - margin - grace - timeout)", got)
	}
	if got := s[3].Sub(s[2]); got != 5*time.Second {
		t.Errorf("renewal after a full grant came %v after it, want the 5s interval", got)
	}
	if _, ok := rec.find(syscall.SIGTERM.String()); ok {
		t.Error("the child was signalled though every renewal succeeded in time")
	}
	lease.markLost()
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
}

// runLease runs a supervisor over any lease with the harness's settings.
func runLease(t *testing.T, clock *fakeClock, rec *recorder, lease leaseLike, script string, change ...func(*Config)) <-chan int {
	t.Helper()
	lk := &anyLocker{lease: lease}
	sh, _ := ResolveCommand("sh")
	cfg := Config{
		Locker:  lk,
		Command: Command{Path: sh, Args: []string{"sh", "-c", script}, Env: os.Environ()},
		TTL:     15 * time.Second, RenewInterval: 5 * time.Second, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
		StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit,
		Clock: clock, Events: rec.events_(),
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
	waitUntil(t, "the child to start", func() bool { return rec.count("started") > 0 })
	return done
}

// A stopped job (SIGSTOP, or a background job that read the terminal) gets
// SIGCONT right after the stop signal, and acts on it at once instead of
// waiting for SIGKILL at the end of the kill grace.
func TestStopSignalIsFollowedBySIGCONT(t *testing.T) {
	lease := newTestLease(1, 15*time.Second)
	dir := t.TempDir()
	clock, rec, done := harness(t, "echo $$ > "+dir+"/pid; kill -STOP $$; exec sleep 1000", lease)
	pid := readPIDFile(t, filepath.Join(dir, "pid"))
	waitUntil(t, "the child to stop itself", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return strings.Contains(string(b), ") T ")
	})
	lease.markLost()
	code := advanceUntilDone(t, clock, done, 100*time.Millisecond)
	if _, ok := rec.find(syscall.SIGKILL.String()); ok {
		t.Error("a stopped child needed SIGKILL: no SIGCONT followed the stop signal")
	}
	if code != ExitLost {
		t.Errorf("exit %d, want %d", code, ExitLost)
	}
}

// A restart of a command whose file was deleted meanwhile exits 127, as a
// shell would, not 125.
func TestRestartOfDeletedCommandExits127(t *testing.T) {
	// In parallel: a supervisor in group mode of its own, no cgroup, no key,
	// no freeze hook, and nothing timed on the fake clock that a busy
	// machine could make late.
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nrm -f "+script+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	rec := &recorder{clock: clock}
	lease := newTestLease(1, 15*time.Second)
	done := runLease(t, clock, rec, lease, "", func(c *Config) {
		c.Command = Command{Path: script, Args: []string{script}, Env: os.Environ()}
		c.Restart = RestartOnFailure
	})
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != ExitNotFound {
		t.Fatalf("exit %d, want %d (command not found)", code, ExitNotFound)
	}
}

// A stop requested while the new lease is being confirmed starts no child.
func TestStopDuringConfirmStartsNothing(t *testing.T) {
	// In parallel: a supervisor in group mode of its own, no cgroup, no key,
	// no freeze hook, and nothing timed on the fake clock that a busy
	// machine could make late.
	t.Parallel()
	rec, release, cancel, done := runHeldInConfirm(t)
	cancel(SignalCause{Signal: syscall.SIGTERM})
	close(release)
	select {
	case code := <-done:
		if code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("supervisor did not finish")
	}
	if n := rec.count("started"); n != 0 {
		t.Fatalf("child started %d times after SIGTERM during the confirm", n)
	}
}

type leaseLike interface {
	Epoch() uint64
	Renew(context.Context) (time.Duration, error)
	Lost() <-chan struct{}
	LostReason() string
	Handle() string
	Release(context.Context) error
}

// anyLocker hands out one lease.
type anyLocker struct {
	testLocker
	lease leaseLike
	once  sync.Once
}

// Acquire hands out the lease once, then waits.
func (l *anyLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	var out locker.Lease
	l.once.Do(func() { out = l.lease })
	if out != nil {
		return out, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A renewal that reports no granted TTL (0, or a negative one) gets the
// requested TTL as its deadline (NewDeadline), so the next renewal keeps the
// interval: it is not taken for a short grant and sent every 50ms.
func TestUnreportedGrantKeepsTheRenewInterval(t *testing.T) {
	for _, grant := range []time.Duration{0, -time.Second} {
		t.Run(grant.String(), func(t *testing.T) {
			clock := newFakeClock()
			lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
				grant: func(n int) time.Duration {
					if n == 1 {
						return 15 * time.Second
					}
					return grant
				}}
			rec := &recorder{clock: clock}
			done := runLease(t, clock, rec, lease, "exec sleep 1000")
			stepFor(t, clock, 12*time.Second, 250*time.Millisecond)
			s := lease.sends()
			if len(s) != 3 {
				t.Errorf("%d renewals in 12s after %v grants, want 3 (the confirm, then every 5s)", len(s), grant)
			}
			if _, ok := rec.find(syscall.SIGTERM.String()); ok {
				t.Error("the child was signalled though every renewal succeeded")
			}
			lease.markLost()
			advanceUntilDone(t, clock, done, 100*time.Millisecond)
		})
	}
}

// The pause after a short grant is never longer than the renew interval: a
// job renewed every 10ms (TTL 1s, grace 500ms, margin 100ms, timeout 10ms)
// granted 615ms must be renewed 10ms later, before its stop signal at
// send + 15ms, not 50ms later after it.
func TestShortGrantPauseNeverExceedsTheInterval(t *testing.T) {
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 1 {
				return time.Second
			}
			return 615 * time.Millisecond
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "exec sleep 1000", func(c *Config) {
		c.TTL, c.RenewInterval, c.KillGrace, c.SafetyMargin = time.Second, 10*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond
	})
	stepFor(t, clock, 150*time.Millisecond, time.Millisecond)
	if e, ok := rec.find(syscall.SIGTERM.String()); ok {
		t.Errorf("the child was signalled (%v) though a renewal every interval would have come in time; renewals at %v", e, lease.sends())
	}
	if n := len(lease.sends()); n < 10 {
		t.Errorf("%d renewals in 150ms at a 10ms interval", n)
	}
	lease.markLost()
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
}

// A short grant on the confirm, the term's first renewal, brings the next
// renewal forward as a later one does: the confirm sent at c and granted
// 8s is followed by a renewal at c+0.5s, not at the 5s interval after the
// stop signal at c+2s.
func TestShortConfirmGrantBringsTheFirstRenewalForward(t *testing.T) {
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 1 {
				return 8 * time.Second
			}
			return 15 * time.Second
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "exec sleep 1000")
	stepFor(t, clock, 8*time.Second, 50*time.Millisecond)
	s := lease.sends()
	if len(s) < 3 {
		t.Fatalf("only %d renewals", len(s))
	}
	if got := s[1].Sub(s[0]); got != 500*time.Millisecond {
		t.Errorf("first renewal %v after a confirm granted 8s, want 500ms (8s - margin - grace - timeout)", got)
	}
	if _, ok := rec.find(syscall.SIGTERM.String()); ok {
		t.Error("the child was signalled though every renewal succeeded in time")
	}
	lease.markLost()
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
}

// A renewal brought forward by a short grant and answered only after the
// stop signal changes nothing, however long its grant (§1.3): renewal 2 at
// t0+5s granted 6.5s puts the stop signal at t0+5.5s and the kill point at
// t0+10.5s; renewal 3, sent at t0+5.05s and answered at t0+6s with 15s,
// would have put them at t0+14.05s and t0+19.05s.
func TestEarlyRenewalAnsweredAfterTheStopBeganChangesNothing(t *testing.T) {
	clock := newFakeClock()
	answer := make(chan struct{})
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 2 {
				return 6500 * time.Millisecond
			}
			return 15 * time.Second
		},
		hold: func(n int) {
			if n == 3 {
				<-answer
			}
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "trap '' TERM; exec sleep 1000")
	t0 := stepFor(t, clock, 6*time.Second, 50*time.Millisecond)
	close(answer)
	// Steps of 250ms from t0+6s land on the kill point, t0+10.5s.
	code := advanceUntilDone(t, clock, done, 250*time.Millisecond)
	s := lease.sends()
	if len(s) < 3 || s[2].Sub(t0) != 5050*time.Millisecond {
		t.Fatalf("renewals sent at %v, want the third at t0+5.05s (t0 %v)", s, t0)
	}
	term, ok := rec.find(syscall.SIGTERM.String())
	if !ok {
		t.Fatal("no SIGTERM")
	}
	// Recorded times run late by how long the loop took to react (a kill
	// is recorded after the job's processes were read); 14.05s and 19.05s
	// are what taking the late answer would give.
	if got := term.at.Sub(t0); got < 5500*time.Millisecond || got >= 14*time.Second {
		t.Errorf("SIGTERM at t0+%v, want t0+5.5s", got)
	}
	kill, ok := rec.find(syscall.SIGKILL.String())
	if !ok {
		t.Fatal("no SIGKILL")
	}
	if got := kill.at.Sub(t0); got < 10500*time.Millisecond || got >= 14*time.Second {
		t.Errorf("SIGKILL at t0+%v, want the kill point t0+10.5s: a renewal answered after the stop began moved it", got)
	}
	if n := rec.count("renewed"); n != 1 {
		t.Errorf("%d renewals taken, want 1: the answer after the stop began must change nothing", n)
	}
	if code != ExitLost {
		t.Errorf("exit %d, want %d", code, ExitLost)
	}
}

// A backend granting 1ns on every renewal ends the term at the first such
// grant, SIGKILL at once (the kill point is already past), without asking
// the backend in a loop meanwhile.
func TestNanosecondGrantsStopAtOnceWithoutSpinning(t *testing.T) {
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 1 {
				return 15 * time.Second
			}
			return time.Nanosecond
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "trap '' TERM; exec sleep 1000")
	t0 := clock.Now()
	code := advanceUntilDone(t, clock, done, 10*time.Millisecond)
	kill, ok := rec.find(syscall.SIGKILL.String())
	if !ok {
		t.Fatal("no SIGKILL")
	}
	// Recorded late by a step or two: the timer at the past kill point fires
	// on the next step, and the kill is recorded after the job was read.
	if got := kill.at.Sub(t0); got < 5*time.Second || got >= 5500*time.Millisecond {
		t.Errorf("SIGKILL at t0+%v, want at once after the 1ns grant at t0+5s", got)
	}
	if n := len(lease.sends()); n > 3 {
		t.Errorf("%d renewals, want at most 3 (the confirm, the 1ns grant, one 50ms later)", n)
	}
	if code != ExitLost {
		t.Errorf("exit %d, want %d", code, ExitLost)
	}
}

// stepFor moves the fake clock on by step until d has passed, letting
// the supervisor settle before each step, and returns when it began.
func stepFor(t *testing.T, clock *fakeClock, d, step time.Duration) time.Time {
	t.Helper()
	t0 := clock.Now()
	for clock.Now().Sub(t0) < d {
		clock.Step(t, step, t0.Add(d))
	}
	return t0
}

// The term's sweep runs beside the confirm, but no child starts before the
// confirm answers, however long after the sweep that is.
func TestNoChildBeforeTheConfirmAnswers(t *testing.T) {
	// In parallel: a supervisor in group mode of its own, no cgroup, no key,
	// no freeze hook, and nothing timed on the fake clock that a busy
	// machine could make late.
	t.Parallel()
	rec, release, cancel, done := runHeldInConfirm(t)
	time.Sleep(300 * time.Millisecond) // the sweep beside it is long over
	if n := rec.count("started"); n != 0 {
		t.Fatalf("child started %d times while the confirm was in flight", n)
	}
	close(release)
	testsupport.WaitFor(t, 10*time.Second, "the child to start once confirmed", func() bool { return rec.count("started") == 1 })
	cancel(SignalCause{Signal: syscall.SIGTERM})
	advanceUntilDone(t, rec.clock.(*fakeClock), done, 100*time.Millisecond)
}

// runHeldInConfirm runs a supervisor of "exec sleep 1000" on a fake clock
// whose first renewal, the confirm of the new lease, is held until the
// test closes release; it returns once that confirm is under way.
func runHeldInConfirm(t *testing.T) (rec *recorder, release chan struct{}, cancel context.CancelCauseFunc, done chan int) {
	t.Helper()
	clock := newFakeClock()
	rec = &recorder{clock: clock}
	inConfirm := make(chan struct{})
	release = make(chan struct{})
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(int) time.Duration { return 15 * time.Second },
		hold: func(n int) {
			if n == 1 {
				close(inConfirm)
				<-release
			}
		}}
	sh, _ := ResolveCommand("sh")
	s, err := New(Config{
		Locker: &anyLocker{lease: lease}, Command: Command{Path: sh, Args: []string{"sh", "-c", "exec sleep 1000"}, Env: os.Environ()},
		TTL: 15 * time.Second, RenewInterval: 5 * time.Second, KillGrace: 5 * time.Second, SafetyMargin: time.Second,
		StopSignal: syscall.SIGTERM, RestartDelay: time.Second, Restart: RestartNever, OnLost: LostExit,
		Clock: clock, Events: rec.events_(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, c := context.WithCancelCause(context.Background())
	done = make(chan int, 1)
	go func() { done <- s.Run(ctx) }()
	<-inConfirm
	return rec, release, c, done
}
