//go:build linux

package systemdtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// docTimerService is the service of OPERATING.md's timer and service
// pair, as written there: the indented block that starts with its path.
func docTimerService(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "OPERATING.md"))
	if err != nil {
		t.Fatal(err)
	}
	var unit []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "    # /etc/systemd/system/nightly-report.service") {
			in = true
		}
		if !in {
			continue
		}
		if strings.TrimSpace(line) == "" {
			break
		}
		unit = append(unit, strings.TrimPrefix(line, "    "))
	}
	if len(unit) == 0 {
		t.Fatal("OPERATING.md has no nightly-report.service block")
	}
	return strings.Join(unit, "\n") + "\n"
}

// TestDocTimerServiceKeepsTheJobInItsUnit: OPERATING.md's timer service,
// as written, keeps the job in the service's own cgroup, so what the job
// prints is in `journalctl -u nightly-report` and the job is the unit's.
// Without Delegate=yes leaderrun moved the job into a transient scope of
// its own, and its output was filed under that scope instead.
func TestDocTimerServiceKeepsTheJobInItsUnit(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	eps := strings.Join(e.Endpoints(), ",")
	unit := regexp.MustCompile(`(?m)^Environment=ETCDCTL_ENDPOINTS=.*$`).ReplaceAllString(docTimerService(t), "Environment=ETCDCTL_ENDPOINTS="+eps)
	m := leaderMachine(t)
	m.WriteFile("/usr/local/bin/nightly-report", "#!/bin/sh\necho \"nightly report ran, epoch $LEADER_EPOCH\"\n", 0o755)
	m.WriteFile("/etc/systemd/system/nightly-report.service", unit, 0o644)
	m.MustRun("systemctl", "daemon-reload")
	m.MustRun("systemctl", "start", "nightly-report.service")
	if r := m.Show("nightly-report.service", "Result"); r != "success" {
		t.Fatalf("nightly-report.service Result=%s\n%s", r, m.Journal("nightly-report.service"))
	}
	if !poll(30*time.Second, func() bool {
		return strings.Contains(m.Journal("nightly-report.service"), "nightly report ran, epoch ")
	}) {
		all, _ := m.Run("journalctl", "--no-pager", "-o", "short", "-n", "30")
		t.Fatalf("the job's output is not in journalctl -u nightly-report.service:\n%s\nthe journal:\n%s", m.Journal("nightly-report.service"), all)
	}
}
