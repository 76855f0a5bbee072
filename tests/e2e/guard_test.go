package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// guardsOf lists the dead-man guards whose parent is pid.
func guardsOf(pid int) []int {
	var out []int
	for _, p := range testsupport.Pids() {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "leaderrun-guard" {
			continue
		}
		if ppid(p) == pid && alive(p) {
			out = append(out, p)
		}
	}
	return out
}

func ppid(pid int) int {
	st, ok := signals.ReadStat(pid)
	if !ok {
		return -1
	}
	return st.PPID
}

// guardOf waits for leaderrun's guard to exist and returns its pid.
func guardOf(t *testing.T, p *Proc) int {
	t.Helper()
	var g []int
	waitFor(t, 5*time.Second, "the dead-man guard to start", func() bool {
		g = guardsOf(p.Pid())
		return len(g) == 1
	})
	return g[0]
}

// wantSmallGuard asserts that p's guard runs the leaderrun-guard binary
// built next to leaderrun, and logs its resident memory.
func wantSmallGuard(t *testing.T, p *Proc) {
	t.Helper()
	g := guardOf(t, p)
	exe, err := os.Readlink("/proc/" + strconv.Itoa(g) + "/exe")
	if err != nil || exe != guardBinary {
		t.Fatalf("guard %d runs %q (%v), want %s", g, exe, err, guardBinary)
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(g) + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			t.Logf("guard %d (%s) %s", g, filepath.Base(exe), strings.Join(strings.Fields(line), " "))
		}
	}
}

// The timeline of these tests: ttl 4s, margin 500ms, so the kill point is
// the last renewal's send time + 3.5s.

func TestGuardKillsGroupOfStoppedLeaderrun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), grandchildScript(dir))...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	g := guardOf(t, p)
	p.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	waitFor(t, 10*time.Second, "the guard to kill the group of a stopped leaderrun", func() bool {
		return !alive(child) && !alive(gc)
	})
	took := time.Since(stopped)
	// Killed by the guard on the kill point (at most ttl - margin after the
	// freeze), while leaderrun was still stopped.
	if took > 3500*time.Millisecond+500*time.Millisecond {
		t.Errorf("group died %v after the freeze; kill point is at most 3.5s after the last renewal", took)
	}
	if took < 2500*time.Millisecond {
		t.Errorf("group died %v after the freeze, before the kill point could have passed", took)
	}
	p.Signal(syscall.SIGCONT)
	if code := p.Wait(10 * time.Second); code != 123 {
		t.Fatalf("exit %d after resuming past the deadline, want 123\n%s", code, p.Output())
	}
	if strings.Count(p.Output(), "child started") != 1 {
		t.Fatalf("child started again after the deadline:\n%s", p.Output())
	}
	waitFor(t, 3*time.Second, "the guard to exit", func() bool { return !alive(g) })
}

func TestGuardKillsGroupWhenLeaderrunIsKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), grandchildScript(dir))...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	g := guardOf(t, p)
	p.Signal(syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, 5*time.Second, "the whole group to die after kill -9 of leaderrun", func() bool {
		return !alive(child) && !alive(gc)
	})
	if took := time.Since(killed); took > time.Second {
		t.Errorf("group died %v after kill -9, want within 1s", took)
	}
	waitFor(t, 5*time.Second, "the guard to exit", func() bool { return !alive(g) })
}

func TestGuardKillsGroupOfDeadlockedLeaderrun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	freeze := filepath.Join(dir, "freeze")
	env := []string{"LEADERRUN_TEST_FREEZE_FILE=" + freeze}
	// The child ignores SIGTERM: only a SIGKILL ends it.
	p := start(t, "leader", env, withCommand(localArgs(dir, "k"), "trap '' TERM; "+grandchildScript(dir))...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	guardOf(t, p)
	if err := os.WriteFile(freeze, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	waitFor(t, 10*time.Second, "the guard to kill the group of a deadlocked leaderrun", func() bool {
		return !alive(child) && !alive(gc)
	})
	if took := time.Since(frozen); took > 4*time.Second {
		t.Errorf("group died %v after the deadlock, want by the kill point (<= 3.5s)", took)
	}
	if err := os.Remove(freeze); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(10 * time.Second); code != 123 {
		t.Fatalf("exit %d, want 123\n%s", code, p.Output())
	}
}

func TestNoGuardOutlivesItsLeadership(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Each run ends a different way; afterwards no guard may remain.
	runs := []struct {
		name string
		args []string
		end  func(p *Proc)
	}{
		{"child exits", withCommand(localArgs(dir, "a"), "sleep 0.2"), func(p *Proc) {}},
		{"graceful stop", withCommand(localArgs(dir, "b"), "exec sleep 1000"), func(p *Proc) { p.Signal(syscall.SIGTERM) }},
		{"restart always", withCommand(localArgs(dir, "c", "--restart", "always", "--restart-delay", "50ms"), "sleep 0.05"), func(p *Proc) {
			time.Sleep(500 * time.Millisecond)
			p.Signal(syscall.SIGINT)
		}},
	}
	for _, r := range runs {
		p := start(t, r.name, nil, r.args...)
		g := guardOf(t, p)
		r.end(p)
		p.Wait(15 * time.Second)
		if alive(g) {
			t.Errorf("%s: guard %d outlived leaderrun", r.name, g)
		}
	}
}

// A guard killed while the job runs is replaced at once; the job runs on.
func TestDeadGuardIsReplaced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/child.pid; exec sleep 1000")...)
	child := readPID(t, dir+"/child.pid")
	g := guardOf(t, p)
	if err := syscall.Kill(g, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next []int
	waitFor(t, 2*time.Second, "a new guard", func() bool {
		next = guardsOf(p.Pid())
		return len(next) == 1 && next[0] != g
	})
	if !alive(child) {
		t.Fatal("the job died with its guard")
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)
}

// Without a guard that can start, no child starts: leaderrun gives
// leadership back and campaigns again (DESIGN §1.9).
func TestNoChildWithoutAGuard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := withBrokenGuard(t, dir)
	cmd := exec.Command(filepath.Join(bin, "leaderrun"), withCommand(localArgs(dir, "k"), "touch "+dir+"/ran")...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	waitFor(t, 10*time.Second, "leaderrun to give leadership back for want of a guard", func() bool {
		return strings.Contains(out.String(), "campaigning again once a guard can start")
	})
	if _, err := os.Stat(dir + "/ran"); err == nil {
		t.Fatalf("the child ran without a guard\n%s", out.String())
	}
}

// withBrokenGuard copies leaderrun into DIR/bin beside a leaderrun-guard
// that cannot be executed, and returns DIR/bin: a leaderrun started from
// there has no dead-man guard to start.
func withBrokenGuard(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "leaderrun"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "leaderrun-guard"), []byte("\x7fELF broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
