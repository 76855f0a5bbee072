package systemdtest

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestJournalPrioritiesAndSecrets: under systemd leaderrun's WARN and ERROR
// lines reach the journal with those priorities (`journalctl -p warning`
// shows them and no INFO line), and the etcd password from the env file
// appears nowhere in the journal, neither from a leader that loses its key
// nor from one that the server refuses.
func TestJournalPrioritiesAndSecrets(t *testing.T) {
	const secret, wrong = "s3cret-right-pw-7f3a", "s3cret-wrong-pw-c91e"
	e := testcluster.StartEtcd(t, 1)
	eps := strings.Join(e.Endpoints(), ",")
	etcdctl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(testcluster.Bin(t, "etcdctl"), append([]string{"--endpoints", eps}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl %v: %v\n%s", args, err, out)
		}
	}
	etcdctl("user", "add", "root:"+secret)
	etcdctl("user", "grant-role", "root", "root")
	etcdctl("auth", "enable")

	m := leaderMachine(t)
	shared := map[string]string{"LEADERRUN_BACKEND": "etcd", "ETCDCTL_ENDPOINTS": eps, "ETCDCTL_USER": "root"}
	m.Configure("good", shared, map[string]string{"ETCDCTL_PASSWORD": secret})
	m.Configure("bad", shared, map[string]string{"ETCDCTL_PASSWORD": wrong})

	epoch, _ := m.start("good")
	// The key vanishes under the leader: a loss, logged as WARN.
	etcdctl("--user", "root:"+secret, "del", "--prefix", "/leaderrun/good/")
	m.Eventually("the loss logged", 30*time.Second, func() bool {
		return strings.Contains(m.Journal("leaderrun@good"), "stopping child")
	})
	if again, _ := m.leading("good", time.Minute); again <= epoch {
		t.Errorf("after the loss and restart: epoch %d, was %d", again, epoch)
	}

	// A refused password: leaderrun's own failure, exit 125, an ERROR.
	_, _ = m.Run("systemctl", "start", "leaderrun@bad")
	m.Eventually("leaderrun@bad failed", 30*time.Second, func() bool {
		return m.Show("leaderrun@bad", "ActiveState") == "failed"
	})
	if got := m.Show("leaderrun@bad", "ExecMainStatus"); got != "125" {
		t.Errorf("leaderrun@bad exited %s, want 125", got)
	}

	warn := m.Journal("leaderrun@good", "-p", "warning")
	if !strings.Contains(warn, "[WARN]") || !strings.Contains(warn, "stopping child") {
		t.Errorf("journalctl -p warning lacks the loss's WARN line:\n%s\nall of it:\n%s", warn, m.Journal("leaderrun@good"))
	}
	if strings.Contains(warn, "[INFO]") {
		t.Errorf("journalctl -p warning shows INFO lines:\n%s", warn)
	}
	// The journal stamps each line: leaderrun's text lines carry no time
	// of their own.
	if stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`); stamp.MatchString(warn) {
		t.Errorf("journal lines carry a second timestamp:\n%s", warn)
	}
	if info := m.Journal("leaderrun@good", "-p", "info..info"); !strings.Contains(info, "[INFO]") || strings.Contains(info, "[WARN]") {
		t.Errorf("journalctl -p info..info:\n%s", info)
	}
	if errs := m.Journal("leaderrun@bad", "-p", "err", "_COMM=leaderrun"); !strings.Contains(errs, "leaderrun") {
		t.Errorf("journalctl -p err shows no error of leaderrun@bad:\n%s\nall of it:\n%s", errs, m.Journal("leaderrun@bad"))
	}

	all, _ := m.Run("journalctl", "--no-pager", "-o", "verbose")
	for _, s := range []string{secret, wrong} {
		if strings.Contains(all, s) {
			t.Errorf("the journal holds the password %q", s)
		}
	}
}
