//go:build linux

package alerts

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// onceMetrics serves `leaderrun history KEY --prometheus` of key on the
// local backend in lockDir, run afresh at each scrape: what a textfile
// collector fed by cron serves, without the wait for cron.
func onceMetrics(t *testing.T, lockDir, key string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := exec.Command(binary, "history", "--backend", "local", "--lock-dir", lockDir, key, "--prometheus").Output()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// runSlot runs one once-per invocation of key, as a cron line would.
func runSlot(t *testing.T, lockDir, key string, period time.Duration) {
	t.Helper()
	// The state directory, where the history lives, is the lock folder.
	args := []string{"--backend", "local", "--lock-dir", lockDir, "--key", key, "--ttl", ttl.String(),
		"--kill-grace", "500ms", "--safety-margin", "300ms", "-q", "--once-per", period.String(), "--", "true"}
	if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
		t.Fatalf("once-per run: %v\n%s", err, out)
	}
}

// TestOncePerSlotMissedFires runs a real Prometheus with the shipped rules
// (shorter `for`) over the history gauges of a once-per key of an 8s
// period (slack for a loaded machine's slow invocations): while an
// invocation comes every second, every slot runs and
// LeaderrunOncePerSlotMissed stays quiet; once they stop it fires after
// two periods, and it resolves when a slot runs again.
func TestOncePerSlotMissedFires(t *testing.T) {
	const period = 8 * time.Second
	lockDir, key := t.TempDir(), "nightly"
	runSlot(t, lockDir, key, period)
	p := testcluster.StartPrometheus(t, testcluster.PrometheusOptions{Targets: []string{onceMetrics(t, lockDir, key)}, RuleFiles: []string{testRules(t)}})
	testsupport.WaitFor(t, 20*time.Second, "Prometheus sees the once-per period", func() bool {
		time.Sleep(100 * time.Millisecond)
		return query(t, p, `leaderrun_once_period_seconds{key="nightly"}`) == period.Seconds()
	})

	for end := time.Now().Add(3 * period); time.Now().Before(end); time.Sleep(time.Second) {
		runSlot(t, lockDir, key, period)
		if s := alertState(t, p, "LeaderrunOncePerSlotMissed", key); s != "" {
			t.Fatalf("LeaderrunOncePerSlotMissed %s while every slot runs", s)
		}
	}
	stopped := time.Now()
	d := waitAlert(t, p, "LeaderrunOncePerSlotMissed", key, "firing", 4*period)
	if d < period {
		t.Errorf("LeaderrunOncePerSlotMissed firing %v after the last run, before the next period was over", d)
	}
	t.Logf("no runs: LeaderrunOncePerSlotMissed firing %v after the last run (period %v)", time.Since(stopped).Round(100*time.Millisecond), period)

	runSlot(t, lockDir, key, period)
	d = waitAlert(t, p, "LeaderrunOncePerSlotMissed", key, "", 15*time.Second)
	t.Logf("a slot ran again: resolved after %v", d.Round(100*time.Millisecond))
}
