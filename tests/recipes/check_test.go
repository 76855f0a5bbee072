//go:build linux

package recipes

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestLeaderRunID: every start of the command gets an id of its own in
// LEADER_RUN_ID, and in once-per mode the slot's id on every start; an
// inherited LEADER_RUN_ID never reaches the command.
func TestLeaderRunID(t *testing.T) {
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	// The command fails on its first start and succeeds on its second.
	ids := func(t *testing.T, extra ...string) []string {
		dir := t.TempDir()
		f := filepath.Join(dir, "ids")
		args := append(localArgs(t, "runid"), append([]string{"--restart", "on-failure", "--restart-delay", "100ms"}, extra...)...)
		code, out := runOnce(t, "runid", args, []string{"PATH=" + jobPath(t), "LEADER_RUN_ID=inherited"},
			`echo "$LEADER_RUN_ID" >> `+f+`; [ $(wc -l < `+f+`) -ge 2 ]`)
		if code != 0 {
			t.Fatalf("leaderrun exited %d, want 0:\n%s", code, out)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}
	t.Run("each start", func(t *testing.T) {
		got := ids(t)
		if len(got) != 2 || got[0] == got[1] || !hex.MatchString(got[0]) || !hex.MatchString(got[1]) {
			t.Fatalf("LEADER_RUN_ID of two starts: %q, want two different ids of 32 hex digits", got)
		}
	})
	t.Run("once-per slot", func(t *testing.T) {
		got := ids(t, "--once-per", "24h")
		slot := time.Now().UTC().Truncate(24 * time.Hour).Format(time.RFC3339)
		if len(got) != 2 || got[0] != slot || got[1] != slot {
			t.Fatalf("LEADER_RUN_ID of two starts in one slot: %q, want the slot %s twice", got, slot)
		}
	})
	t.Run("run-id", func(t *testing.T) {
		if got := ids(t, "--run-id", "invoices-2026-12"); len(got) != 2 || got[0] != "invoices-2026-12" || got[1] != got[0] {
			t.Fatalf("LEADER_RUN_ID with --run-id: %q, want invoices-2026-12 twice", got)
		}
	})
}

// TestCheckMinRemaining: inside the job, `leaderrun check --min-remaining`
// reads the supervisor's own stop point, live: when the supervisor stops
// renewing (it is frozen), the time left shrinks and the check fails well
// before the lease could pass. Outside the job it goes by the backend's
// lease, and where the backend cannot tell it says so (125).
func TestCheckMinRemaining(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	// ttl 4s, renewals every 1s, stop point 1.5s before the deadline: right
	// after a renewal 2.5s are left, never less than 1.5s while renewals
	// succeed.
	args := etcdArgs(e, "recipe-check")
	job := `echo "$LEADER_EPOCH" > ` + results + `.epoch
	while :; do
		leaderrun check --min-remaining 1s 2>>` + results + `.err; echo "ok $?" >> ` + results + `
		leaderrun check --min-remaining 10s 2>>` + results + `.err; echo "long $?" >> ` + results + `
		sleep 0.1
	done`
	p, err := chaos.Start(chaos.ProcSpec{
		Name: "check", Path: bins.Leaderrun,
		Args:    append(append([]string{}, args...), "--id", "check", "--", "sh", "-c", job),
		Env:     []string{"PATH=" + jobPath(t)},
		LogPath: filepath.Join(dir, "log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Signal(syscall.SIGCONT)
		_ = p.Signal(syscall.SIGTERM)
		if _, ok := p.Wait(20 * time.Second); !ok {
			p.Kill()
		}
	})
	lines := func() []string {
		b, _ := os.ReadFile(results)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	testsupport.WaitFor(t, 60*time.Second, "ten rounds of checks", func() bool { return len(lines()) >= 20 || p.Exited() })
	for _, l := range lines()[:20] {
		if l != "ok 0" && l != "long 1" {
			t.Fatalf("while leaderrun renews: %q, want \"ok 0\" (1s left) and \"long 1\" (not 10s left)\n%s", l, strings.Join(lines(), "\n"))
		}
	}
	errs, _ := os.ReadFile(results + ".err")
	if !strings.Contains(string(errs), "left (by leaderrun's own deadline), less than --min-remaining 10s") {
		t.Errorf("the failed check does not say how much is left by whose view:\n%s", errs)
	}

	// Outside the job: the backend's lease.
	outside := ([]string{"check", "--backend", "etcd", "--etcd-endpoints", strings.Join(e.Endpoints(), ","), "--key", "recipe-check"})
	b, err := os.ReadFile(results + ".epoch")
	if err != nil {
		t.Fatal(err)
	}
	epoch := strings.TrimSpace(string(b))
	if code, out := runLeaderrun(t, append(outside, "--epoch", epoch, "--min-remaining", "1s")...); code != 0 {
		t.Errorf("outside check --min-remaining 1s: exit %d, want 0: %s", code, out)
	}
	if code, out := runLeaderrun(t, append(outside, "--epoch", epoch, "--min-remaining", "1h")...); code != 1 || !strings.Contains(out, "by the backend's lease") {
		t.Errorf("outside check --min-remaining 1h: exit %d, want 1 naming the backend's lease: %s", code, out)
	}

	// Freeze the supervisor alone: no renewal moves its deadline, and the
	// job (still running, its guard not yet due) sees the time shrink.
	before := len(lines())
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	testsupport.WaitFor(t, 5*time.Second, "a check inside the job to fail", func() bool {
		return strings.Contains(strings.Join(lines()[before:], "\n"), "ok 1")
	})
	took := time.Since(stopped)
	_ = p.Signal(syscall.SIGCONT)
	// 2.5s at most were left at the freeze; less than 1s is left 1.5s later.
	if took > 3*time.Second {
		t.Errorf("the check failed %v after the supervisor froze, want within 2.5s", took)
	}
	t.Logf("a check with --min-remaining 1s failed %v after the supervisor froze", took.Round(time.Millisecond))
}

// runLeaderrun runs leaderrun with args outside any job.
func runLeaderrun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := strings.Join(append([]string{`"$LEADERRUN"`}, quoteAll(args)...), " ")
	return sh(t, []string{"LEADERRUN=" + bins.Leaderrun, "PATH=" + os.Getenv("PATH")}, cmd)
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// TestCheckMinRemainingWithoutAnAnswer: where neither leaderrun's deadline
// nor the backend tells how much is left (local backend, outside the job),
// check refuses to guess (125); a job whose leaderrun is gone is told it
// does not lead (1).
func TestCheckMinRemainingWithoutAnAnswer(t *testing.T) {
	args := localArgs(t, "recipe-noanswer")
	j := startJob(t, "noanswer", args, "", "PATH="+jobPath(t))
	lockDir := args[3]
	base := []string{"check", "--backend", "local", "--lock-dir", lockDir, "--key", "recipe-noanswer", "--epoch", j.get("LEADER_EPOCH"), "--min-remaining", "1s"}
	if code, out := runLeaderrun(t, base...); code != 125 || !strings.Contains(out, "does not say how much") {
		t.Errorf("outside, on the local backend: exit %d, want 125 saying the backend does not tell: %s", code, out)
	}
	// Inside the job it is known.
	if code, out := sh(t, j.env, "leaderrun check --min-remaining 1s"); code != 0 {
		t.Errorf("inside the job: exit %d, want 0: %s", code, out)
	}
	gone := append(j.env, "LEADERRUN_DEADLINE_FILE=/proc/999999999/fd/5")
	if code, out := sh(t, gone, "leaderrun check --min-remaining 1s"); code != 1 || !strings.Contains(out, "is gone") {
		t.Errorf("with its leaderrun gone: exit %d, want 1 saying so: %s", code, out)
	}
	j.end()
}
