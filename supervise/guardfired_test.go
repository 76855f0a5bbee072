package supervise

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// standInGuard is a dead-man guard the test controls: it writes what
// leaderrun tells it to dir/guard.in, and once dir/fire exists it says
// "fired" and, with killJob, SIGKILLs the last job it was told to watch,
// as the real guard does at its kill point; then it touches dir/fired. It
// never says "released": a release that is slow or failed.
func standInGuard(dir string, killJob bool) *guard.Spec {
	kill := ""
	if killJob {
		kill = "1"
	}
	script := `
exec 4<&0 # a background command's stdin would be /dev/null
cat <&4 > "$D/guard.in" & c=$!
exec 4<&-
while [ ! -e "$D/fire" ]; do kill -0 $c 2>/dev/null || exit 0; sleep 0.01; done
echo fired >&3
rm -f "$D/fire" # the next term's guard waits for a fire of its own
if [ -n "$KILLJOB" ]; then
	pg=$(sed -n 's/^watch [0-9-]* \([0-9]*\) .*/\1/p' "$D/guard.in" | tail -n 1)
	[ -n "$pg" ] && kill -s KILL -- "-$pg"
fi
: > "$D/fired"
wait $c
`
	return &guard.Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script},
		Env: append(os.Environ(), "D="+dir, "KILLJOB="+kill)}
}

// guardHeard is what the stand-in guard was told so far.
func guardHeard(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "guard.in"))
	return string(b)
}

// fireGuard makes the stand-in guard fire and waits until it has.
func fireGuard(t *testing.T, dir string) {
	t.Helper()
	waitUntil(t, "the guard to be told the job", func() bool { return strings.Contains(guardHeard(dir), "watch ") })
	if err := os.WriteFile(filepath.Join(dir, "fire"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the guard to fire", func() bool {
		_, err := os.Stat(filepath.Join(dir, "fired"))
		return err == nil
	})
}

// advanceFor moves fake time by up to d in steps and returns the exit
// code, or reports false when the supervisor still runs after that.
func advanceFor(t *testing.T, clock *fakeClock, done <-chan int, d, step time.Duration) (int, bool) {
	t.Helper()
	for end := clock.Now().Add(d); clock.Now().Before(end); {
		select {
		case code := <-done:
			return code, true
		default:
		}
		clock.Step(t, step, end)
	}
	select {
	case code := <-done:
		return code, true
	case <-time.After(2 * time.Second):
		return 0, false
	}
}

// heartbeat makes the event loop turn every HeartbeatInterval, as under a
// systemd watchdog: stallLoop turns it so.
func heartbeat(c *Config) { c.Events.Tick = func() {} }

// stallLoop makes the leader's event loop hang at its next turn, as a
// stopped or swapped-out leaderrun would, while the rest of the process
// (the reaper, the guard's reply reader) runs on. It returns once the loop
// hangs, and a function that lets it go on.
func stallLoop(t *testing.T, clock *fakeClock, stall *atomic.Bool, stalled <-chan struct{}) (resume func()) {
	t.Helper()
	stall.Store(true)
	clock.Settle(t)
	clock.Advance(HeartbeatInterval) // a turn of the loop
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the event loop never turned")
	}
	return func() { stall.Store(false) }
}

// stallHook installs freezeHook for one test: the loop hangs while stall
// is set, and says so on the returned channel.
// fireWhileStalled stalls the supervisor's loop once the stand-in guard in
// dir watches the job, makes the guard fire and kill the child, and lets
// the loop go on.
func fireWhileStalled(t *testing.T, dir string, clock *fakeClock, stall *atomic.Bool, stalled <-chan struct{}) {
	t.Helper()
	child := readPIDFile(t, dir+"/child.pid")
	waitUntil(t, "the guard to be told the job", func() bool { return strings.Contains(guardHeard(dir), "watch ") })
	resume := stallLoop(t, clock, stall, stalled)
	fireGuard(t, dir)
	waitUntil(t, "the guard to kill the child", func() bool { return !signals.ProcessAlive(child) })
	resume()
}

func stallHook(t *testing.T) (*atomic.Bool, <-chan struct{}) {
	stall := &atomic.Bool{}
	stalled := make(chan struct{}, 1)
	freezeHook = func() {
		if !stall.Load() {
			return
		}
		select {
		case stalled <- struct{}{}:
		default:
		}
		for stall.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { freezeHook = nil })
	return stall, stalled
}

// A guard that fired ends the term, while leaderrun's own deadline is far
// away (the fake clock stands still: as far as the guard could tell,
// leaderrun had stalled). Here the loop is stalled while the guard fires
// and SIGKILLs the child, so on resuming leaderrun finds both the child's
// death (137) and the guard's "fired": the term ends as a loss, exit 123,
// and nothing starts again with this term's epoch (DESIGN §1.9).
func TestGuardThatFiredEndsTheTerm(t *testing.T) {
	for _, restart := range []RestartPolicy{RestartNever, RestartAlways} {
		t.Run(string(restart), func(t *testing.T) {
			dir := t.TempDir()
			stall, stalled := stallHook(t)
			lease := newTestLease(4, 15*time.Second)
			clock, rec, done := harness(t, "echo $$ > "+dir+"/child.pid; exec sleep 1000", lease, func(c *Config) {
				c.Guard = standInGuard(dir, true)
				c.Restart = restart
				heartbeat(c)
			})
			fireWhileStalled(t, dir, clock, stall, stalled)
			// Past the restart delay (1s), well inside the deadline (9s
			// to the stop signal).
			code, exited := advanceFor(t, clock, done, 3*time.Second, 100*time.Millisecond)
			if n := rec.count("started"); n != 1 {
				t.Errorf("child started %d times, want once: nothing starts after the guard fired", n)
			}
			if !exited {
				t.Fatal("the supervisor still leads 3s of fake time after the guard fired")
			}
			if code != ExitLost {
				t.Errorf("exit %d after the guard fired, want %d", code, ExitLost)
			}
		})
	}
}

// Under --on-lost rejoin, a term its guard ended is a loss like any other:
// leaderrun campaigns again, and the next child runs with the next term's
// epoch.
func TestGuardThatFiredRejoins(t *testing.T) {
	dir := t.TempDir()
	stall, stalled := stallHook(t)
	epochs := filepath.Join(dir, "epochs")
	// The second term's child exits 0 on its own, which ends the run.
	script := "echo $LEADER_EPOCH >> " + epochs + "; [ $LEADER_EPOCH = 8 ] && exit 0; echo $$ > " + dir + "/child.pid; exec sleep 1000"
	first, second := newTestLease(7, 15*time.Second), newTestLease(8, 15*time.Second)
	clock, rec, done := harness(t, script, first, func(c *Config) {
		leases := make(chan *testLease, 2)
		leases <- first
		leases <- second
		c.Locker = &testLocker{leases: leases}
		c.Guard = standInGuard(dir, true)
		c.OnLost = LostRejoin
		heartbeat(c)
	})
	fireWhileStalled(t, dir, clock, stall, stalled)
	code, exited := advanceFor(t, clock, done, 5*time.Second, 100*time.Millisecond)
	if !exited {
		t.Fatalf("no second term: the supervisor still runs; %d starts", rec.count("started"))
	}
	if code != 0 {
		t.Errorf("exit %d, want 0 from the second term's child", code)
	}
	b, _ := os.ReadFile(epochs)
	if got := strings.Fields(string(b)); strings.Join(got, " ") != "7 8" {
		t.Errorf("children ran with epochs %v, want [7 8]: once per term", got)
	}
}

// A renewal answered after the guard fired is a loss, not an extension:
// the guard hears no new kill point and the term ends with 123.
func TestRenewalAnsweredAfterTheGuardFiredIsALoss(t *testing.T) {
	dir := t.TempDir()
	stall, stalled := stallHook(t)
	lease := newTestLease(5, 15*time.Second)
	lease.gate = make(chan struct{})
	clock, rec, done := harness(t, "exec sleep 1000", lease, func(c *Config) {
		c.Guard = standInGuard(dir, false)
		heartbeat(c)
	})
	waitUntil(t, "the guard to be told the job", func() bool { return strings.Contains(guardHeard(dir), "watch ") })
	clock.Settle(t)
	clock.Advance(5 * time.Second) // the renewal goes out and waits in the gate
	resume := stallLoop(t, clock, stall, stalled)
	fireGuard(t, dir)
	close(lease.gate) // ... and is answered now, after the guard fired
	waitUntil(t, "the renewal's answer", func() bool { return lease.renews.Load() >= 2 })
	resume()
	code, exited := advanceFor(t, clock, done, 10*time.Second, 100*time.Millisecond)
	if n := rec.count("renewed"); n != 0 {
		t.Errorf("%d renewals taken after the guard fired", n)
	}
	if !exited {
		t.Fatal("the supervisor still leads 10s of fake time after the guard fired")
	}
	if code != ExitLost {
		t.Errorf("exit %d, want %d", code, ExitLost)
	}
	if heard := guardHeard(dir); strings.Contains(heard, "extend ") {
		t.Errorf("the guard was told a new kill point after it fired:\n%s", heard)
	}
	if n := rec.count("started"); n != 1 {
		t.Errorf("child started %d times, want once", n)
	}
}

// guardKillPoints lists the kill points the guard heard, in order, from
// watch and extend messages.
func guardKillPoints(t *testing.T, dir string) []int64 {
	t.Helper()
	var out []int64
	for _, line := range strings.Split(guardHeard(dir), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "watch" && f[0] != "extend" {
			continue
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("bad kill point in %q", line)
		}
		out = append(out, at)
	}
	return out
}

// The guard hears the lease's kill point after every successful renewal,
// and it is leaderrun's own SIGKILL point, deadline - safety margin: not
// earlier, so a stall shorter than that leaves the job alone, and not
// later; also while a restart waits (DESIGN §1.9).
func TestGuardHearsLeaderrunsOwnKillPoint(t *testing.T) {
	cases := []struct {
		name   string
		script string
		change func(*Config)
	}{
		{"job running", "exec sleep 1000", func(*Config) {}},
		{"restart waiting", "exit 0", func(c *Config) { c.Restart, c.RestartDelay = RestartAlways, 25*time.Second }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lease := newTestLease(6, 15*time.Second)
			clock, rec, done := harness(t, tc.script, lease, func(c *Config) {
				c.Guard = standInGuard(dir, false)
				tc.change(c)
			})
			waitUntil(t, "the guard to be told the job", func() bool { return strings.Contains(guardHeard(dir), "watch ") })
			const renewals = 4
			for i := 1; i <= renewals; i++ {
				clock.Settle(t)
				before := guard.MonoNow()
				clock.Advance(5 * time.Second) // the renew interval
				waitUntil(t, "the renewal", func() bool { return rec.count("renewed") == i })
				clock.Settle(t)
				after := guard.MonoNow()
				// The stand-in writes down what it heard a moment later.
				points := guardKillPoints(t, dir)
				for wait := time.Now().Add(2 * time.Second); len(points) <= i && time.Now().Before(wait); {
					time.Sleep(time.Millisecond)
					points = guardKillPoints(t, dir)
				}
				if len(points) != i+1 {
					t.Fatalf("after renewal %d the guard heard %d kill points, want %d (one per renewal)", i, len(points), i+1)
				}
				// The fake clock stood at the renewal's send time when the
				// kill point was converted: it lies TTL - margin = 14s of
				// CLOCK_MONOTONIC after that moment.
				want := int64(15*time.Second - time.Second)
				if got := points[i]; got < before+want || got > after+want {
					t.Fatalf("renewal %d: guard's kill point %v after the renewal, want %v (leaderrun's own SIGKILL point)",
						i, time.Duration(got-before), time.Duration(want))
				}
			}
			if n := rec.count("started"); n != 1 {
				t.Errorf("child started %d times during the test, want once", n)
			}
			lease.markLost()
			if _, exited := advanceFor(t, clock, done, 10*time.Second, 100*time.Millisecond); !exited {
				t.Fatal("the supervisor did not stop after the loss")
			}
		})
	}
}

// A renewal granted so much shorter a TTL that it ends the term at once
// still tells the guard the earlier kill point first: a guard left with the
// old one would trail the lease, and a leaderrun that stalled now would
// have its job outlive the deadline (DESIGN §1.6, §1.9).
func TestGuardHearsAnEarlierKillPointThatEndsTheTerm(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	lease := &shrinkingLease{testLease: newTestLease(1, 15*time.Second), clock: clock,
		grant: func(n int) time.Duration {
			if n == 1 {
				return 15 * time.Second
			}
			return 3 * time.Second // deadline 3s after the send: stop signal overdue
		}}
	rec := &recorder{clock: clock}
	done := runLease(t, clock, rec, lease, "trap '' TERM; exec sleep 1000", func(c *Config) {
		c.Guard = standInGuard(dir, false)
	})
	waitUntil(t, "the guard to be told the job", func() bool { return strings.Contains(guardHeard(dir), "watch ") })
	clock.Settle(t)
	before := guard.MonoNow()
	clock.Advance(5 * time.Second) // the renewal that shrinks the lease
	waitUntil(t, "the stop", func() bool { return rec.count("stopping") > 0 })
	after := guard.MonoNow()
	waitUntil(t, "the guard to hear it", func() bool { return len(guardKillPoints(t, dir)) >= 2 })
	points := guardKillPoints(t, dir)
	want := int64(3*time.Second - time.Second) // granted TTL - margin after the send
	if got := points[len(points)-1]; got < before+want || got > after+want {
		t.Errorf("the guard's last kill point is %v after the shrinking renewal, want %v", time.Duration(got-before), time.Duration(want))
	}
	// The stop polls the job every 10ms until SIGKILL at the kill point,
	// 2s after the send, so no step is skipped: steps of 500ms, as nothing
	// of the stop is timed here.
	if code, exited := advanceFor(t, clock, done, 10*time.Second, 500*time.Millisecond); !exited || code != ExitLost {
		t.Errorf("exit %d (exited %v), want %d", code, exited, ExitLost)
	}
}

// A guard that fired and died before leaderrun read its "fired" is
// replaced by nobody: the term ends as a loss. Ending it must not write
// to the dead guard, whose pipe is closed by then: its descriptor number
// is free and may already be another file's (DESIGN §1.9). Here the job
// is gone but not yet seen gone, so ending the term tells "gone" to
// whatever guard the term still has.
func TestGuardThatFiredAndDiedIsNotWrittenTo(t *testing.T) {
	dir := t.TempDir()
	var logs testsupport.SyncBuffer
	sh, err := ResolveCommand("sh")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		Locker:        &testLocker{},
		Command:       Command{Path: sh, Args: []string{"sh", "-c", "exit 0"}, Env: os.Environ()},
		TTL:           15 * time.Second,
		RenewInterval: 5 * time.Second,
		KillGrace:     5 * time.Second,
		SafetyMargin:  time.Second,
		StopSignal:    syscall.SIGTERM,
		RestartDelay:  time.Second,
		Restart:       RestartNever,
		OnLost:        LostExit,
		Logger:        hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}),
		// Says "fired" once told to, and exits.
		Guard: &guard.Spec{Path: "/bin/sh", Args: []string{"sh", "-c",
			`while [ ! -e "$D/fire" ]; do sleep 0.01; done; echo fired >&3`},
			Env: append(os.Environ(), "D="+dir)},
	})
	if err != nil {
		t.Fatal(err)
	}
	lease := newTestLease(3, 15*time.Second)
	l := &leadership{
		lease:    lease,
		guard:    guardTerm{now: s.clock.Now},
		timeline: StopTimeline{Deadline: s.clock.Now().Add(time.Minute), SafetyMargin: time.Second, KillGrace: 5 * time.Second},
	}
	if err := s.ensureGuard(l); err != nil {
		t.Fatal(err)
	}
	job, err := s.box.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartChild(s.cfg.Command, job)
	if err != nil {
		t.Fatal(err)
	}
	job.Started(c.Pid())
	<-c.Done()
	l.job = job // gone, its exit handled, not yet seen gone
	exited := l.guard.exitedC()
	if err := os.WriteFile(filepath.Join(dir, "fire"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not exit")
	}
	s.onGuardExit(l)
	if !l.stopping || !l.lost || l.code != ExitLost {
		t.Errorf("after the guard fired and died: stopping %v, lost %v, code %d; want a loss, %d", l.stopping, l.lost, l.code, ExitLost)
	}
	if out := logs.String(); strings.Contains(out, "cannot reach the guard") {
		t.Errorf("the dead guard's closed pipe was written to:\n%s", out)
	}
}
