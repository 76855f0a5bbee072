package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Three candidates on one key with --once-per, started 0-3s apart as cron
// on three hosts with skewed clocks would start them: the slot runs once.

// onceCandidates starts three leaderruns of key's args 0, 1.5 and 3s apart,
// each running script, and returns them.
func onceCandidates(t *testing.T, args []string, script string) []*Proc {
	t.Helper()
	var ps []*Proc
	for i := range 3 {
		if i > 0 {
			time.Sleep(1500 * time.Millisecond)
		}
		ps = append(ps, start(t, "candidate "+strconv.Itoa(i+1), nil,
			withCommand(append(args, "--once-per", "24h", "-q"), script)...))
	}
	return ps
}

// runLines reads the log the children append to.
func runLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// oncePerScenarios runs the once-per cases on one backend; args builds a
// candidate's arguments for a fresh key.
// status builds `leaderrun status` arguments for key on the same backend.
func oncePerScenarios(t *testing.T, args, status func(key string) []string) {
	t.Run("one run per slot", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("once")
		slot := time.Now().UTC().Format("2006-01-02") + "T00:00:00Z"
		ps := onceCandidates(t, args(key), "echo start >> "+log+"; sleep 2; echo done >> "+log)
		for _, p := range ps {
			if code := p.Wait(60 * time.Second); code != 0 {
				t.Fatalf("%s: exit %d, want 0 (ran, or skipped a slot that ran)\n%s", p.name, code, p.Output())
			}
			if p.Output() != "" {
				t.Fatalf("%s with -q printed:\n%s", p.name, p.Output())
			}
		}
		if lines := runLines(log); count(lines, "start") != 1 || count(lines, "done") != 1 {
			t.Fatalf("children ran %v, want exactly one run", lines)
		}
		st := start(t, "status", nil, append([]string{"status"}, status(key)...)...)
		if code := st.Wait(20 * time.Second); code != 0 || !strings.Contains(st.Output(), "last run  slot "+slot+" ran on host") {
			t.Fatalf("status: exit %d, want 0 and the last run of slot %s:\n%s", code, slot, st.Output())
		}
	})
	t.Run("a failed first run is retried exactly once", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		log, failed := filepath.Join(dir, "runs"), filepath.Join(dir, "failed")
		script := "echo start >> " + log + "; sleep 1; if [ ! -e " + failed + " ]; then touch " + failed +
			"; echo failed >> " + log + "; exit 1; fi; echo done >> " + log
		ps := onceCandidates(t, args(newKey("oncefail")), script)
		codes := map[int]int{}
		for _, p := range ps {
			code := p.Wait(60 * time.Second)
			codes[code]++
			// Quiet, but a failed child is a warning.
			want := ""
			if code == 1 {
				want = "[WARN]  leaderrun: child exited: pid="
			}
			if out := p.Output(); want == "" && out != "" || want != "" && (strings.Count(out, "\n") != 1 || !strings.Contains(out, want) || !strings.Contains(out, "exit_code=1 ")) {
				t.Fatalf("%s with -q printed:\n%s", p.name, p.Output())
			}
		}
		lines := runLines(log)
		if count(lines, "start") != 2 || count(lines, "failed") != 1 || count(lines, "done") != 1 {
			t.Fatalf("children ran %v, want one failed run and exactly one retry", lines)
		}
		if codes[1] != 1 || codes[0] != 2 {
			t.Fatalf("exit codes %v, want one 1 (the failed run) and two 0", codes)
		}
	})
	t.Run("leader killed -9 mid-run", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		log, leaderPID := filepath.Join(dir, "runs"), filepath.Join(dir, "leader.pid")
		// The first run hangs until its leaderrun is killed; the retry finishes.
		script := "echo start >> " + log + "; if [ ! -e " + leaderPID + " ]; then echo $PPID > " + leaderPID +
			"; exec sleep 1000; fi; echo done >> " + log
		ps := onceCandidates(t, args(newKey("oncekill")), script)
		victim := readPID(t, leaderPID)
		var killed *Proc
		for _, p := range ps {
			if p.Pid() == victim {
				killed = p
			}
		}
		if killed == nil {
			t.Fatalf("the first run's parent %d is no candidate", victim)
		}
		killed.Signal(syscall.SIGKILL)
		for _, p := range ps {
			code := p.Wait(90 * time.Second)
			if p != killed && code != 0 {
				t.Fatalf("%s: exit %d, want 0\n%s", p.name, code, p.Output())
			}
		}
		if lines := runLines(log); count(lines, "start") != 2 || count(lines, "done") != 1 {
			t.Fatalf("children ran %v, want the killed run and exactly one retry", lines)
		}
	})
	t.Run("record at start: a failed run is not retried", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		a := args(newKey("oncestart"))
		ps := onceCandidates(t, append(a, "--once-record", "start"), "echo start >> "+log+"; sleep 1; exit 1")
		codes := map[int]int{}
		for _, p := range ps {
			codes[p.Wait(60*time.Second)]++
		}
		if lines := runLines(log); count(lines, "start") != 1 {
			t.Fatalf("children ran %v, want one run (at-most-once)", lines)
		}
		if codes[1] != 1 || codes[0] != 2 {
			t.Fatalf("exit codes %v, want one 1 and two 0", codes)
		}
	})
}

func TestOncePerLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oncePerScenarios(t, func(key string) []string { return localArgs(dir, key) },
		func(key string) []string { return []string{"--backend", "local", "--lock-dir", dir, "--key", key} })
}

func TestOncePerEtcd(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	oncePerScenarios(t, func(key string) []string { return etcdArgs(eps, key) },
		func(key string) []string {
			return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(eps, ","), "--key", key}
		})
}

func TestOncePerConsul(t *testing.T) {
	t.Parallel()
	addr := testcluster.StartConsul(t, testcluster.ConsulOptions{}).HTTPAddr(0)
	oncePerScenarios(t, func(key string) []string { return consulArgs(addr, key) },
		func(key string) []string { return []string{"--backend", "consul", "--consul-addr", addr, "--key", key} })
}
