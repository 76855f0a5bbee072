//go:build linux

package systemdtest

import (
	"strings"
	"testing"
	"time"
)

// TestInstanceWithoutItsEnvFileFailsOnce: starting leaderrun@KEY before
// /etc/leaderrun/KEY.env exists (a typo in the instance name, a step of
// the README skipped) fails once, naming the missing file, instead of
// restarting every RestartSec for ever with "Failed to load environment
// files" and no file named.
func TestInstanceWithoutItsEnvFileFailsOnce(t *testing.T) {
	m := leaderMachine(t)
	out, err := m.Run("systemctl", "start", "leaderrun@nosuch")
	if err == nil {
		t.Fatalf("systemctl start leaderrun@nosuch succeeded without /etc/leaderrun/nosuch.env:\n%s", out)
	}
	var state string
	if !poll(30*time.Second, func() bool {
		state = m.Show("leaderrun@nosuch.service", "ActiveState")
		return state == "failed" || state == "inactive"
	}) {
		t.Fatalf("leaderrun@nosuch stays %s (NRestarts=%s): it restarts for ever\n%s", state, m.Show("leaderrun@nosuch.service", "NRestarts"), m.Journal("leaderrun@nosuch.service"))
	}
	if n := m.Show("leaderrun@nosuch.service", "NRestarts"); n != "0" {
		t.Errorf("leaderrun@nosuch restarted %s times", n)
	}
	status, _ := m.Run("systemctl", "status", "--no-pager", "leaderrun@nosuch")
	if !strings.Contains(status+m.Journal("leaderrun@nosuch.service"), "/etc/leaderrun/nosuch.env") {
		t.Errorf("neither systemctl status nor the journal names /etc/leaderrun/nosuch.env:\n%s", status)
	}
}
