package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The timeline of the stall tests: ttl 6s, safety margin 500ms, renewals
// every 500ms, kill grace 300ms (shorter than the renew interval). The
// lease's kill point is the last renewal's send time + 5.5s, leaderrun's own
// stop signal 300ms before it.
var stallTimeline = []string{"--ttl", "6s", "--renew-interval", "500ms", "--kill-grace", "300ms", "--safety-margin", "500ms"}

// startsLogged is the epochs the child logged, one line per start.
func startsLogged(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// leaderrun is stopped (SIGSTOP: only leaderrun, not its guard nor its
// child) three renewals into its term and kept stopped until its guard has
// killed the job, then continued. The guard's kill point is leaderrun's own
// SIGKILL point for the last deadline leaderrun knew (DESIGN §1.9), so the
// job dies 4.5-5.5s after the stop, never while leaderrun could still think
// itself within its lease. On resuming, leaderrun learns that the guard
// fired (or finds itself past its deadline), starts nothing more in the
// term, with --restart always neither, and exits 123, not with the killed
// child's 137.
func TestStalledLeaderrunEndsTheTermItsGuardEnded(t *testing.T) {
	t.Parallel()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		stalledTerm(t, func(key string) []string {
			return append([]string{"--backend", "local", "--lock-dir", dir, "--key", key}, stallTimeline...)
		})
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		eps := testcluster.StartEtcd(t, 1).Endpoints()
		stalledTerm(t, func(key string) []string {
			return append([]string{"--backend", "etcd", "--etcd-endpoints", strings.Join(eps, ","), "--key", newKey(key)}, stallTimeline...)
		})
	})
}

// stalledTerm runs the stall with --restart never and always; backend gives
// the backend's flags for a key.
func stalledTerm(t *testing.T, backend func(key string) []string) {
	for _, restart := range []string{"never", "always"} {
		t.Run("restart "+restart, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			starts := filepath.Join(dir, "starts")
			script := "echo $LEADER_EPOCH >> " + starts + "; echo $$ > " + dir + "/child.pid; exec sleep 1000"
			args := append(backend("stall-"+restart), "--restart", restart, "--restart-delay", "1ms", "--log-level", "debug")
			p := start(t, "leader", nil, withCommand(args, script)...)
			child := readPID(t, dir+"/child.pid")
			g := guardOf(t, p)
			waitFor(t, 10*time.Second, "three renewals into the term", func() bool {
				return strings.Count(p.Output(), "leaderrun: renewed") >= 3
			})
			p.Signal(syscall.SIGSTOP)
			stopped := time.Now()
			waitFor(t, 10*time.Second, "the guard to kill the job of the stopped leaderrun", func() bool { return !alive(child) })
			took := time.Since(stopped)
			p.Signal(syscall.SIGCONT)
			code := p.Wait(10 * time.Second)
			t.Logf("the guard killed the job %v after the stop", took.Round(time.Millisecond))
			// The last renewal before the stop was sent at most one renew
			// interval before it (two, should the stop fall between a send
			// and its answer): the kill point is 4.5-5.5s after the stop.
			// A guard told lazily had the kill point of the term's first
			// renewal: 4s after the stop.
			if took < 4600*time.Millisecond {
				t.Errorf("the guard killed the job %v after the stop, before leaderrun's own kill point (>= 4.5s)", took)
			}
			if took > 5500*time.Millisecond+500*time.Millisecond {
				t.Errorf("the guard killed the job %v after the stop, after the lease's kill point (<= 5.5s)", took)
			}
			if code != 123 {
				t.Errorf("exit %d after the guard fired, want 123", code)
			}
			if got := startsLogged(t, starts); len(got) != 1 {
				t.Errorf("the child started %d times (epochs %v), want once: nothing may start after the guard fired", len(got), got)
			}
			waitFor(t, 3*time.Second, "the guard to exit", func() bool { return !alive(g) })
		})
	}
}
