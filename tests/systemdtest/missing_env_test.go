//go:build linux

package systemdtest

import (
	"strings"
	"testing"
	"time"
)

// TestInstanceWithoutItsEnvFileFailsOnce: starting leaderrun@KEY before
// /etc/leaderrun/KEY.env exists (a typo in the instance name, a step of
// the README skipped) fails once, as a failed assertion, instead of
// restarting every RestartSec for ever with "Failed to load environment
// files".
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
	// systemd 252 forgets which assertion failed once the unit is
	// unloaded; the start's error and the journal say an assertion failed,
	// and the unit's comment and OPERATING.md say which.
	if said := out + m.Journal("leaderrun@nosuch.service"); !strings.Contains(said, "ssertion failed") {
		t.Errorf("the start does not say an assertion failed:\n%s", said)
	}
}
