package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/local"
	"github.com/leaderrun/leaderrun/supervise"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestChainCallsBothSidesOfEveryEvent fails when supervise.Events grows a
// callback that Chain forgets.
func TestChainCallsBothSidesOfEveryEvent(t *testing.T) {
	var a, b supervise.Events
	calls := map[string][]string{}
	record := func(ev reflect.Value, side string) {
		for i := 0; i < ev.NumField(); i++ {
			name, ft := ev.Type().Field(i).Name, ev.Field(i).Type()
			ev.Field(i).Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
				calls[name] = append(calls[name], side)
				return nil
			}))
		}
	}
	record(reflect.ValueOf(&a).Elem(), "a")
	record(reflect.ValueOf(&b).Elem(), "b")

	chained := reflect.ValueOf(Chain(a, b))
	for i := 0; i < chained.NumField(); i++ {
		f := chained.Field(i)
		name := chained.Type().Field(i).Name
		if f.IsNil() {
			t.Errorf("Chain drops %s", name)
			continue
		}
		args := make([]reflect.Value, f.Type().NumIn())
		for j := range args {
			args[j] = reflect.Zero(f.Type().In(j))
		}
		f.Call(args)
		if got := strings.Join(calls[name], ","); got != "a,b" {
			t.Errorf("%s called %q, want a then b", name, got)
		}
	}

	// A side without the callback is skipped, not called.
	var hits int
	only := Chain(supervise.Events{}, supervise.Events{Released: func() { hits++ }})
	only.Released()
	if hits != 1 || only.Campaigning != nil {
		t.Fatalf("one-sided chain: hits=%d, Campaigning nil=%v", hits, only.Campaigning == nil)
	}
}

func TestHealth(t *testing.T) {
	now := time.Now()
	stall := time.Second
	cases := []struct {
		name     string
		st       state
		lastTick time.Time
		ok       bool
		problem  string
	}{
		{"campaigning never judged by ticks", state{role: RoleCampaigning}, now.Add(-time.Hour), true, ""},
		{"leader, lease ahead, loop turning", state{role: RoleLeader, holding: true, deadline: now.Add(5 * time.Second)}, now, true, ""},
		{"leader past deadline", state{role: RoleLeader, holding: true, deadline: now.Add(-2 * time.Second)}, now, false, "lease past its deadline by 2s"},
		{"leader at deadline", state{role: RoleLeader, holding: true, deadline: now}, now, false, "past its deadline"},
		{"leader, loop stuck", state{role: RoleLeader, holding: true, deadline: now.Add(5 * time.Second)}, now.Add(-1500 * time.Millisecond), false, "event loop stuck for 1.5s"},
		{"leader, loop silent but within allowance", state{role: RoleLeader, holding: true, deadline: now.Add(5 * time.Second)}, now.Add(-900 * time.Millisecond), true, ""},
		{"stopping, last turn releasing", state{role: RoleStopping, holding: true, deadline: now.Add(-time.Second)}, now.Add(-4 * time.Second), true, ""},
		{"stopping, loop stuck", state{role: RoleStopping, holding: true}, now.Add(-7 * time.Second), false, "stuck for 7s while stopping"},
		{"stopped and released", state{role: RoleStopping}, now.Add(-time.Hour), true, ""},
	}
	for _, c := range cases {
		h := c.st.health(now, c.lastTick, stall)
		if h.OK != c.ok || !strings.Contains(h.String(), c.problem) {
			t.Errorf("%s: health %v %q, want ok=%v containing %q", c.name, h.OK, h.String(), c.ok, c.problem)
		}
	}
}

func get(t *testing.T, o *Observer, path string) (int, string) {
	t.Helper()
	return testsupport.HTTPGet(t, o.Addr().String(), path)
}

// metric returns the value of one exposition line, e.g.
// `leaderrun_renewals_total{result="ok"}`.
func metric(t *testing.T, body, series string) float64 {
	t.Helper()
	v, ok := testsupport.Metric(body, series)
	if !ok {
		t.Fatalf("no series %s in:\n%s", series, body)
	}
	return v
}

func TestEndpointsFollowTheEvents(t *testing.T) {
	o, err := start(Config{Key: "billing", ID: "me", TTL: 1500 * time.Millisecond, HTTPAddr: "127.0.0.1:0", RenewInterval: 300 * time.Millisecond}, notifier{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ev := o.Events()

	// The series the alert rules join on: the key and id, and the TTL.
	_, first := get(t, o, "/metrics")
	if metric(t, first, `leaderrun_info{id="me",key="billing"}`) != 1 || metric(t, first, "leaderrun_ttl_seconds") != 1.5 {
		t.Fatalf("info and ttl series:\n%s", first)
	}

	ev.Campaigning()
	code, body := get(t, o, "/healthz")
	if code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("campaigning /healthz: %d %q", code, body)
	}
	_, body = get(t, o, "/metrics")
	if metric(t, body, "leaderrun_is_leader") != 0 || metric(t, body, "leaderrun_epoch") != 0 {
		t.Fatalf("campaigning metrics:\n%s", body)
	}
	for _, s := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, "\n"+s+" ") {
			t.Errorf("/metrics lacks the %s collector", s)
		}
	}

	ev.Acquired(7, time.Now().Add(10*time.Second))
	ev.ChildStarted(4242)
	ev.Renewed(time.Now().Add(12 * time.Second))
	ev.RenewFailed(errors.New("timeout"))
	ev.Tick()
	_, body = get(t, o, "/metrics")
	for series, want := range map[string]float64{
		"leaderrun_is_leader":                      1,
		"leaderrun_epoch":                          7,
		`leaderrun_renewals_total{result="ok"}`:    1,
		`leaderrun_renewals_total{result="error"}`: 1,
		"leaderrun_leadership_acquired_total":      1,
		"leaderrun_child_starts_total":             1,
		"leaderrun_leadership_lost_total":          0,
	} {
		if got := metric(t, body, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if left := metric(t, body, "leaderrun_lease_remaining_seconds"); left < 10 || left > 12 {
		t.Errorf("lease remaining %v, want about 12s", left)
	}
	_, body = get(t, o, "/status")
	var st RunStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	if st.Role != RoleLeader || st.Key != "billing" || st.ID != "me" || st.Epoch != 7 || st.ChildPID != 4242 || !st.Healthy ||
		st.LeaseRemainingSeconds < 10 || st.LeaseRemainingSeconds > 12 {
		t.Fatalf("/status while leading: %+v", st)
	}

	// The deadline passes without a renewal: unhealthy at once.
	ev.Renewed(time.Now().Add(-time.Millisecond))
	ev.Tick()
	code, body = get(t, o, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "past its deadline") {
		t.Fatalf("past deadline /healthz: %d %q", code, body)
	}

	ev.Stopping("leadership lost: key deleted", true)
	ev.ChildExited(137)
	ev.Released()
	ev.Campaigning()
	_, body = get(t, o, "/metrics")
	if metric(t, body, "leaderrun_is_leader") != 0 || metric(t, body, "leaderrun_leadership_lost_total") != 1 ||
		metric(t, body, `leaderrun_child_exits_total{code="137"}`) != 1 || metric(t, body, "leaderrun_epoch") != 0 ||
		metric(t, body, "leaderrun_lease_remaining_seconds") != 0 {
		t.Fatalf("metrics after loss:\n%s", body)
	}
	if code, _ := get(t, o, "/healthz"); code != 200 {
		t.Fatalf("campaigning again /healthz: %d", code)
	}
}

func TestBindFailureNamesTheField(t *testing.T) {
	ln := testsupport.Listen(t)
	_, err := start(Config{Key: "k", HTTPAddr: ln.Addr().String()}, notifier{})
	var ce *locker.ConfigError
	if !errors.As(err, &ce) || ce.Field != "HTTPAddr" || !strings.Contains(err.Error(), ln.Addr().String()) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind on a used port: %v", err)
	}
}

// notifySocket listens like systemd on a unixgram socket and points
// NOTIFY_SOCKET (and WATCHDOG_USEC) at it for this test.
func notifySocket(t *testing.T, watchdog time.Duration) <-chan string {
	t.Helper()
	path, msgs := testsupport.NotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	if watchdog > 0 {
		t.Setenv("WATCHDOG_USEC", strconv.FormatInt(watchdog.Microseconds(), 10))
		t.Setenv("WATCHDOG_PID", "")
	}
	return msgs
}

// expect waits for a message containing want, skipping others, and
// returns it.
var expect = testsupport.ExpectNotify

func TestSystemdNotifications(t *testing.T) {
	msgs := notifySocket(t, 200*time.Millisecond) // pings every 100ms
	o, err := start(Config{Key: "billing", RenewInterval: 100 * time.Millisecond}, systemdNotifier())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.notify.watchdog != 100*time.Millisecond {
		t.Fatalf("watchdog ping interval %v, want half of WATCHDOG_USEC", o.notify.watchdog)
	}
	ev := o.Events()
	ev.Campaigning()
	if m := expect(t, msgs, "READY=1", 2*time.Second); !strings.Contains(m, "STATUS=campaigning for billing") {
		t.Fatalf("first notification %q, want READY=1 with the status", m)
	}

	ev.Acquired(9, time.Now().Add(time.Hour))
	ev.ChildStarted(77)
	expect(t, msgs, "STATUS=leader of billing, epoch 9, child pid 77", 2*time.Second)

	// Healthy: the loop turns every 10ms, pings flow.
	var ticking, stop atomic.Bool
	ticking.Store(true)
	tickerDone := make(chan struct{})
	go func() {
		defer close(tickerDone)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			if stop.Load() {
				return
			}
			if ticking.Load() {
				ev.Tick()
			}
		}
	}()
	defer func() { stop.Store(true); <-tickerDone }()
	for i := 0; i < 3; i++ {
		expect(t, msgs, "WATCHDOG=1", time.Second)
	}

	// The loop stops turning: once it counts as stuck (1s), no more pings.
	ticking.Store(false)
	waitHealth(t, o, false, 3*time.Second)
	// A ping decided just before the verdict flipped may still arrive.
	testsupport.DrainNotify(msgs, 150*time.Millisecond)
	if _, ok := testsupport.NextNotify(msgs, "WATCHDOG=1", 500*time.Millisecond); ok { // five ping intervals
		t.Fatalf("watchdog ping while the loop is stuck (%s)", o.Health())
	}

	// It turns again: pings resume.
	ticking.Store(true)
	expect(t, msgs, "WATCHDOG=1", 2*time.Second)

	// A loss with --on-lost exit is the start of a shutdown.
	ev.Stopping("leadership lost", true)
	expect(t, msgs, "STOPPING=1", 2*time.Second)
}

func TestCloseSaysStoppingWhenNoStopSequenceDid(t *testing.T) {
	msgs := notifySocket(t, 0)
	o, err := start(Config{Key: "k", Rejoin: true}, systemdNotifier())
	if err != nil {
		t.Fatal(err)
	}
	ev := o.Events()
	ev.Campaigning()
	expect(t, msgs, "READY=1", 2*time.Second)
	ev.Acquired(1, time.Now().Add(time.Hour))
	// With --on-lost rejoin a loss is not a shutdown.
	ev.Stopping("leadership lost", true)
	if m := expect(t, msgs, "STATUS=stopping", 2*time.Second); strings.Contains(m, "STOPPING=1") {
		t.Fatalf("STOPPING=1 on a loss with rejoin: %q", m)
	}
	o.Close()
	expect(t, msgs, "STOPPING=1", 2*time.Second)
}

func waitHealth(t *testing.T, o *Observer, ok bool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for o.Health().OK != ok {
		if time.Now().After(deadline) {
			t.Fatalf("health stayed %v for %v", !ok, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowBackend answers Leader only from its third call on.
type slowBackend struct {
	locker.Locker
	calls atomic.Int32
}

func (s *slowBackend) Leader(ctx context.Context) (locker.Holder, error) {
	if s.calls.Add(1) < 3 {
		return locker.Holder{}, fmt.Errorf("dial: connection refused")
	}
	return locker.Holder{}, fmt.Errorf("key: %w", locker.ErrNoLeader)
}

func TestReadyWaitsForTheBackendToAnswer(t *testing.T) {
	msgs := notifySocket(t, 0)
	b := &slowBackend{}
	began := time.Now()
	o, err := start(Config{Key: "k", Backend: b}, systemdNotifier())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	o.Events().Campaigning() // a standby: never acquires
	m := expect(t, msgs, "READY=1", 5*time.Second)
	if b.calls.Load() != 3 {
		t.Fatalf("READY=1 after %d backend reads, want 3 (two failures, then an answer)", b.calls.Load())
	}
	// Two retries back off 500ms then 1s.
	if took := time.Since(began); took < 1500*time.Millisecond {
		t.Fatalf("READY=1 after %v: sent before the backend answered? %q", took, m)
	}
}

func TestWatchdogIsOnlyForTheNamedProcess(t *testing.T) {
	notifySocket(t, 0)
	t.Setenv("WATCHDOG_USEC", "4000000")
	for pid, want := range map[string]time.Duration{
		"":                        2 * time.Second,
		strconv.Itoa(os.Getpid()): 2 * time.Second,
		"1":                       0, // systemd watches another process
	} {
		t.Setenv("WATCHDOG_PID", pid)
		if got := systemdNotifier().watchdog; got != want {
			t.Errorf("WATCHDOG_PID=%q: ping every %v, want %v", pid, got, want)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if systemdNotifier().enabled() {
		t.Error("notifier enabled without NOTIFY_SOCKET")
	}
}

// TestLocalBackendIsReadyAtTheFirstCampaign: the local backend has no
// server to wait for, so READY=1 comes with the first campaign and not
// before, and the same with --no-wait, whose OneAttempt wrapper must not
// hide that the backend is local.
func TestLocalBackendIsReadyAtTheFirstCampaign(t *testing.T) {
	for _, noWait := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-wait=%v", noWait), func(t *testing.T) {
			msgs := notifySocket(t, 0)
			dir := t.TempDir()
			opts := locker.Options{Key: "billing", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second, NoWait: noWait}
			l, err := local.New(local.Config{Options: opts, Dir: dir, StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			var lk locker.Locker = l
			if noWait {
				lk = locker.OneAttempt(l, opts.Key, dir, 0) // as leaderrun --no-wait builds it
			}
			o, err := start(Config{Key: "billing", Backend: lk}, systemdNotifier())
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if m, ok := testsupport.NextNotify(msgs, "READY=1", 300*time.Millisecond); ok {
				t.Fatalf("READY=1 before the first campaign (a probe of a local backend?): %q", m)
			}
			o.Events().Campaigning()
			expect(t, msgs, "READY=1", 2*time.Second)
		})
	}
}
