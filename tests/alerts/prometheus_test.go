//go:build linux

package alerts

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// ttl is the leaderruns' --ttl in the live test; Prometheus scrapes and
// evaluates every second.
const ttl = 3 * time.Second

// localArgs are the flags of a leaderrun on the local backend whose
// --ttl is ttl, sharing lockDir with the others of key.
func localArgs(t *testing.T, lockDir, key string) []string {
	return []string{"--backend", "local", "--lock-dir", lockDir, "--state-dir", t.TempDir(),
		"--key", key, "--ttl", ttl.String(), "--kill-grace", "500ms", "--safety-margin", "300ms"}
}

// testRules writes the shipped rules with the `for` durations cut down to
// the test's scale (1s scrapes): the expressions stay as shipped.
func testRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for from, to := range map[string]string{"for: 30s": "for: 1s", "for: 1m": "for: 3s", "for: 2m": "for: 3s", "for: 10m": "for: 1s"} {
		if n := strings.Count(s, from); n != 1 {
			t.Fatalf("%s: %q occurs %d times, want once", rulesFile, from, n)
		}
		s = strings.Replace(s, from, to, 1)
	}
	return testsupport.WriteFile(t, filepath.Join(t.TempDir(), "rules.yml"), s, 0o644)
}

// alertState is "", "pending" or "firing" for alert name on key.
func alertState(t *testing.T, p *testcluster.Prometheus, name, key string) string {
	t.Helper()
	alerts, err := p.Alerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Labels["alertname"] == name && a.Labels["key"] == key {
			return a.State
		}
	}
	return ""
}

// query returns the value of a query with one result, or -1 without one.
func query(t *testing.T, p *testcluster.Prometheus, q string) float64 {
	t.Helper()
	res, err := p.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		return -1
	}
	s, _ := res[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s: value %q", q, s)
	}
	return v
}

// waitAlert waits up to within for alert name on key to reach state ("" for
// resolved) and returns how long that took.
func waitAlert(t *testing.T, p *testcluster.Prometheus, name, key, state string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testsupport.WaitFor(t, within, name+" "+key+" "+orResolved(state), func() bool {
		time.Sleep(100 * time.Millisecond)
		return alertState(t, p, name, key) == state
	})
	return time.Since(start)
}

func orResolved(state string) string {
	if state == "" {
		return "resolved"
	}
	return state
}

// quiet watches the alerts for d and fails on NoLeader in any state or
// TwoLeaders firing for key.
func quiet(t *testing.T, p *testcluster.Prometheus, key, during string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if s := alertState(t, p, "LeaderrunNoLeader", key); s != "" {
			t.Fatalf("during %s: LeaderrunNoLeader is %s", during, s)
		}
		if s := alertState(t, p, "LeaderrunTwoLeaders", key); s == "firing" {
			t.Fatalf("during %s: LeaderrunTwoLeaders is firing", during)
		}
	}
}

// leaderOf waits for exactly one of ls to lead and returns it.
func leaderOf(t *testing.T, ls []*leaderrun, except *leaderrun) (*leaderrun, time.Duration) {
	t.Helper()
	start := time.Now()
	var leader *leaderrun
	testsupport.WaitFor(t, 3*ttl, "a new leader", func() bool {
		leader = nil
		for _, l := range ls {
			if l != except && l.leads() {
				if leader != nil {
					return false
				}
				leader = l
			}
		}
		return leader != nil
	})
	return leader, time.Since(start)
}

// TestAlertsFollowLeadership runs a real Prometheus with the shipped rules
// (shorter `for`) over three leaderruns of key "billing" on one lock
// folder, one more whose child crashes in a loop, and a rogue leaderrun of
// "billing" on another lock folder (a second holder, as a broken backend
// would allow). Normal handovers (SIGTERM, and SIGKILL of the leader with
// standbys waiting) fire nothing; with every host of the key stopped,
// LeaderrunNoLeader fires only after the TTL, and resolves once a host
// leads again; two holders fire LeaderrunTwoLeaders; the crash loop fires
// LeaderrunChildRestartLoop.
func TestAlertsFollowLeadership(t *testing.T) {
	lockDir := t.TempDir()
	var hosts []*leaderrun
	for _, name := range []string{"a", "b", "c"} {
		hosts = append(hosts, newLeaderrun(t, name, append(localArgs(t, lockDir, "billing"), "--", "sleep", "1000")...))
	}
	crashGo := filepath.Join(t.TempDir(), "go")
	crashy := newLeaderrun(t, "crashy", append(localArgs(t, t.TempDir(), "crashy"),
		"--restart", "always", "--restart-delay", "10ms", "--",
		"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.1; done; exit 3`, crashGo)...)
	rogue := newLeaderrun(t, "rogue", append(localArgs(t, t.TempDir(), "billing"), "--", "sleep", "1000")...)
	targets := []string{rogue.addr, crashy.addr}
	for _, h := range hosts {
		h.start()
		targets = append(targets, h.addr)
	}
	crashy.start()
	p := testcluster.StartPrometheus(t, testcluster.PrometheusOptions{Targets: targets, RuleFiles: []string{testRules(t)}})

	testsupport.WaitFor(t, 20*time.Second, "Prometheus sees three billing hosts and one leader", func() bool {
		time.Sleep(100 * time.Millisecond)
		return query(t, p, `sum(leaderrun:target:up{key="billing"})`) == 3 && query(t, p, `leaderrun:key:leaders{key="billing"}`) == 1
	})
	groups, err := p.Rules()
	if err != nil {
		t.Fatal(err)
	}
	var alerting int
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
			if r.Type == "alerting" {
				alerting++
			}
		}
	}
	if alerting != 6 {
		t.Errorf("/api/v1/rules lists %d alerting rules, want 6", alerting)
	}
	// The crash loop begins once Prometheus has seen the first start:
	// the backoff doubles from 10ms, so about 8 starts follow in 2.5s.
	testsupport.WaitFor(t, 10*time.Second, "Prometheus sees the crashy child start", func() bool {
		time.Sleep(100 * time.Millisecond)
		return query(t, p, `leaderrun_child_starts_total{instance="`+crashy.addr+`"}`) == 1
	})
	testsupport.WriteFile(t, crashGo, "", 0o644)
	d := waitAlert(t, p, "LeaderrunChildRestartLoop", "crashy", "firing", 20*time.Second)
	t.Logf("crash loop: LeaderrunChildRestartLoop firing after %v", d.Round(100*time.Millisecond))

	// Handovers with standbys waiting: nothing fires.
	leader, _ := leaderOf(t, hosts, nil)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		leader.signal(sig)
		next, took := leaderOf(t, hosts, leader)
		t.Logf("%v of the leader %s: %s leads after %v", sig, leader.name, next.name, took.Round(10*time.Millisecond))
		quiet(t, p, "billing", sig.String()+" handover", ttl+4*time.Second)
		leader.start()
		leader = next
	}

	// Every host stops: LeaderrunNoLeader fires, but not before the TTL.
	for _, h := range hosts {
		if h != leader {
			h.signal(syscall.SIGTERM)
		}
	}
	leader.signal(syscall.SIGTERM)
	stopped := time.Now()
	for time.Since(stopped) < ttl-time.Second {
		if s := alertState(t, p, "LeaderrunNoLeader", "billing"); s != "" {
			t.Fatalf("LeaderrunNoLeader %s %v after the last host stopped, before the TTL (%v)", s, time.Since(stopped), ttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitAlert(t, p, "LeaderrunNoLeader", "billing", "firing", ttl+10*time.Second)
	t.Logf("all stopped: LeaderrunNoLeader firing %v after the leader stopped (TTL %v)", time.Since(stopped).Round(100*time.Millisecond), ttl)
	groups, err = p.Rules()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Name == "LeaderrunNoLeader" && r.State != "firing" {
				t.Errorf("/api/v1/rules: LeaderrunNoLeader is %q, want firing", r.State)
			}
		}
	}

	// One host comes back: it resolves.
	hosts[0].start()
	d = waitAlert(t, p, "LeaderrunNoLeader", "billing", "", 15*time.Second)
	t.Logf("one host back: LeaderrunNoLeader resolved after %v", d.Round(100*time.Millisecond))

	// A second holder of the key: LeaderrunTwoLeaders fires, and resolves
	// when it stops.
	rogue.start()
	d = waitAlert(t, p, "LeaderrunTwoLeaders", "billing", "firing", 20*time.Second)
	t.Logf("two holders: LeaderrunTwoLeaders firing after %v", d.Round(100*time.Millisecond))
	rogue.signal(syscall.SIGTERM)
	waitAlert(t, p, "LeaderrunTwoLeaders", "billing", "", 15*time.Second)
	if s := alertState(t, p, "LeaderrunNoLeader", "billing"); s != "" {
		t.Errorf("LeaderrunNoLeader %s with a host leading", s)
	}
}
