//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
)

// Health checks are contained like the job (DESIGN §1.16): a check that
// starts a real setsid daemon holding its output open neither hangs the
// check nor outlives it, in either containment mode.

var healthTags atomic.Int64

// daemonTag is an argument for `sleep` (37.NNNN seconds) that no other
// test's process carries: every process of it is found by it in /proc.
func daemonTag() string {
	n := healthTags.Add(1)
	return "37." + strconv.Itoa(os.Getpid()%10000*100+int(n))
}

// noneLeft fails the test if a process with tag as an argument still runs,
// and kills it.
func noneLeft(t *testing.T, what, tag string) {
	t.Helper()
	left := processesWithArg(tag)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(left) > 0 {
		t.Errorf("%s: %d processes of the health checks left running: %v", what, len(left), left)
	}
}

func eachContainMode(t *testing.T, f func(t *testing.T, mode contain.Mode)) {
	for _, mode := range []contain.Mode{contain.Cgroup, contain.Group} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f(t, mode)
		})
	}
}

// TestHealthDaemonCheckPasses: a check that starts a setsid daemon on its
// output and exits 0 passes within --health-timeout, so the candidate
// leads; no more than the running check's own daemon is ever alive, and
// nothing of the checks outlives leaderrun.
func TestHealthDaemonCheckPasses(t *testing.T) {
	t.Parallel()
	eachContainMode(t, func(t *testing.T, mode contain.Mode) {
		tag := daemonTag()
		hc := "setsid sleep " + tag + " & sleep 0.3; exit 0"
		began := time.Now()
		p := start(t, "a", nil, withCommand(localArgs(t.TempDir(), newKey("hc-daemon-pass"), "--contain", string(mode),
			"--health-cmd", hc, "--health-timeout", "2s", "--health-interval", "500ms"), "exec sleep 1000")...)
		waitFor(t, 20*time.Second, "the candidate leading after its first check", func() bool {
			return strings.Contains(p.Output(), "child started")
		})
		t.Logf("leading %v after start", time.Since(began).Round(time.Millisecond))
		most := 0
		for range 15 {
			most = max(most, len(processesWithArg(tag)))
			time.Sleep(100 * time.Millisecond)
		}
		if most > 1 {
			t.Errorf("%d daemons of the checks alive at once: each check's should die with it", most)
		}
		termNoneLeft(t, p, tag)
	})
}

// TestHealthDaemonTermDuringCheck: SIGTERM while a check runs whose
// daemon holds its output ends leaderrun at once, the check killed, all
// of it.
func TestHealthDaemonTermDuringCheck(t *testing.T) {
	t.Parallel()
	eachContainMode(t, func(t *testing.T, mode contain.Mode) {
		tag := daemonTag()
		hc := "setsid sleep " + tag + " & sleep 30; exit 0"
		p := start(t, "a", nil, withCommand(localArgs(t.TempDir(), newKey("hc-daemon-term"), "--contain", string(mode),
			"--health-cmd", hc, "--health-timeout", "60s"), "exec sleep 1000")...)
		waitFor(t, 20*time.Second, "the check's daemon", func() bool { return len(processesWithArg(tag)) > 0 })
		began := time.Now()
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(15 * time.Second); code != 143 {
			t.Errorf("exit %d after SIGTERM, want 143", code)
		}
		t.Logf("exited %v after SIGTERM", time.Since(began).Round(time.Millisecond))
		noneLeft(t, "after leaderrun exited", tag)
	})
}

// TestHealthDaemonFailingStepsDown: a leader whose checks fail (exit 1)
// while each leaves a setsid daemon on its output counts each failure and
// steps down after --health-failures; no daemon is left.
func TestHealthDaemonFailingStepsDown(t *testing.T) {
	t.Parallel()
	eachContainMode(t, func(t *testing.T, mode contain.Mode) {
		dir := t.TempDir()
		tag := daemonTag()
		sick := filepath.Join(dir, "sick")
		pidFile := filepath.Join(dir, "child.pid")
		hc := "if [ -e " + sick + " ]; then setsid sleep " + tag + " & sleep 0.2; exit 1; fi; exit 0"
		p := start(t, "a", nil, withCommand(localArgs(dir, newKey("hc-daemon-fail"), "--contain", string(mode),
			"--health-cmd", hc, "--health-timeout", "2s", "--health-interval", "300ms", "--health-failures", "2"),
			"echo $$ > "+pidFile+"; exec sleep 1000")...)
		child := readPID(t, pidFile)
		if err := os.WriteFile(sick, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		waitFor(t, 20*time.Second, "the leader stepping down for its failing checks", func() bool {
			return strings.Contains(p.Output(), "the health check failed 2 times in a row") && !alive(child)
		})
		t.Logf("stepped down %v after the checks began to fail", time.Since(began).Round(time.Millisecond))
		termNoneLeft(t, p, tag)
	})
}

// TestHealthDaemonNotTheJobs: the orphan a check leaves re-parented to
// leaderrun while the check still runs is the check's, not the job's: a
// job whose child exits 0 ends without "processes the child left
// running", and the check's orphan dies with its check.
func TestHealthDaemonNotTheJobs(t *testing.T) {
	t.Parallel()
	eachContainMode(t, func(t *testing.T, mode contain.Mode) {
		tag := daemonTag()
		hc := "(setsid sleep " + tag + " >/dev/null 2>&1 &); sleep 1; exit 0"
		p := start(t, "a", nil, withCommand(localArgs(t.TempDir(), newKey("hc-daemon-job"), "--contain", string(mode),
			"--health-cmd", hc, "--health-timeout", "5s", "--health-interval", "200ms"), "sleep 4; exit 0")...)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Errorf("exit %d, want the child's 0", code)
		}
		if out := p.Output(); strings.Contains(out, "left running") {
			t.Errorf("a check's process was taken for the job's:\n%s", out)
		}
		noneLeft(t, "after leaderrun exited", tag)
	})
}

// TestHealthDaemonOfKilledLeaderrunSwept: a check's daemon outlives a
// leaderrun killed together with its guard (SIGKILL, as an OOM kill of
// the group does); it carries its check's marker, so the next leaderrun of
// the key kills it before its child starts and says what it was.
func TestHealthDaemonOfKilledLeaderrunSwept(t *testing.T) {
	t.Parallel()
	eachContainMode(t, func(t *testing.T, mode contain.Mode) {
		dir := t.TempDir()
		tag := daemonTag()
		long := filepath.Join(dir, "long")
		hc := "if [ -e " + long + " ]; then setsid sleep " + tag + " & sleep 30; fi; exit 0"
		args := localArgs(dir, "k", "--contain", string(mode))
		a := start(t, "A", nil, withCommand(append(args, "--health-cmd", hc, "--health-timeout", "60s", "--health-interval", "200ms"), "exec sleep 1000")...)
		waitFor(t, 20*time.Second, "A leading", func() bool { return strings.Contains(a.Output(), "child started") })
		if err := os.WriteFile(long, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var daemon []int
		waitFor(t, 10*time.Second, "the check's daemon", func() bool { daemon = processesWithArg(tag); return len(daemon) > 0 })
		killBoth(t, a)
		time.Sleep(300 * time.Millisecond)
		if len(processesWithArg(tag)) == 0 {
			t.Fatalf("the check's daemon %v died with its leaderrun: nothing left to sweep", daemon)
		}
		b := start(t, "B", nil, withCommand(args, "exec sleep 1000")...)
		waitFor(t, 20*time.Second, "B leading", func() bool { return strings.Contains(b.Output(), "child started") })
		if !strings.Contains(b.Output(), "killed what a health check of this key left running") {
			t.Errorf("B did not say it killed the check's leftover:\n%s", b.Output())
		}
		noneLeft(t, "once B started its child", tag)
		b.Signal(syscall.SIGTERM)
		b.Wait(15 * time.Second)
	})
}

// termNoneLeft stops leaderrun p with SIGTERM, wants exit 143, and fails
// if any process with tag in its arguments is left.
func termNoneLeft(t *testing.T, p *Proc, tag string) {
	t.Helper()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(15 * time.Second); code != 143 {
		t.Errorf("exit %d after SIGTERM, want 143", code)
	}
	noneLeft(t, "after leaderrun exited", tag)
}
