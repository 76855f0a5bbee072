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

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// localArgs runs leaderrun on the local backend in a private lock dir, with
// a short timeline so losses play out in seconds.
func localArgs(lockDir, key string, extra ...string) []string {
	args := []string{"--backend", "local", "--lock-dir", lockDir, "--key", key,
		"--ttl", "4s", "--renew-interval", "300ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	return append(args, extra...)
}

// withCommand appends "-- sh -c script".
func withCommand(args []string, script string) []string {
	return append(args, "--", "sh", "-c", script)
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noexec := testsupport.WriteFile(t, filepath.Join(dir, "noexec.sh"), "#!/bin/sh\nexit 0\n", 0o644)
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"child exits 0", withCommand(localArgs(dir, "c0"), "exit 0"), 0},
		{"child's own code", withCommand(localArgs(dir, "c3"), "exit 3"), 3},
		{"child killed by SIGKILL", withCommand(localArgs(dir, "c137"), "kill -KILL $$"), 137},
		{"child killed by SIGTERM", withCommand(localArgs(dir, "c143"), "kill -TERM $$"), 143},
		{"not executable", append(localArgs(dir, "c126"), "--", noexec), 126},
		{"not found", append(localArgs(dir, "c127"), "--", filepath.Join(dir, "missing")), 127},
		{"usage error", append(localArgs(dir, "c125"), "--ttl", "x", "--", "true"), 125},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, c.name, nil, c.args...)
			if got := p.Wait(20 * time.Second); got != c.want {
				t.Errorf("exit %d, want %d\n%s", got, c.want, p.Output())
			}
		})
	}
}

func TestNoWaitWhileHeldExits124(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder := start(t, "holder", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/holder.pid; exec sleep 1000")...)
	readPID(t, dir+"/holder.pid")
	p := start(t, "no-wait", nil, append(localArgs(dir, "k", "--no-wait"), "--", "true")...)
	if got := p.Wait(10 * time.Second); got != 124 {
		t.Fatalf("exit %d, want 124", got)
	}
	q := start(t, "timeout", nil, append(localArgs(dir, "k", "--acquire-timeout", "300ms"), "--", "true")...)
	if got := q.Wait(10 * time.Second); got != 124 {
		t.Fatalf("--acquire-timeout: exit %d, want 124", got)
	}
	holder.Signal(syscall.SIGTERM)
	holder.Wait(10 * time.Second)
}

func TestBadInputIsOneLineAnd125(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"--backend", "local", "--lock-dir", dir}
	cases := []struct {
		name string
		args []string
		flag string
	}{
		{"missing key", append(base, "--", "true"), "--key"},
		{"bad key", append(base, "--key", "../etc", "--", "true"), "--key"},
		{"key with ..", append(base, "--key", "a..b", "--", "true"), "--key"},
		{"missing command", append(base, "--key", "k"), "command"},
		{"bad duration", append(base, "--key", "k", "--kill-grace", "soon", "--", "true"), "kill-grace"},
		{"negative margin", append(base, "--key", "k", "--safety-margin", "-1s", "--", "true"), "--safety-margin"},
		{"timeline violates 1.10", append(base, "--key", "k", "--ttl", "5s", "--kill-grace", "4s", "--", "true"), "--ttl"},
		{"unknown backend", []string{"--backend", "redis", "--key", "k", "--", "true"}, "--backend"},
		{"unknown signal", append(base, "--key", "k", "--stop-signal", "SIGNOPE", "--", "true"), "--stop-signal"},
		{"unknown restart", append(base, "--key", "k", "--restart", "sometimes", "--", "true"), "--restart"},
		{"unknown on-lost", append(base, "--key", "k", "--on-lost", "panic", "--", "true"), "--on-lost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, c.name, nil, c.args...)
			code := p.Wait(10 * time.Second)
			out := strings.TrimSpace(p.Output())
			if code != 125 {
				t.Errorf("exit %d, want 125\n%s", code, out)
			}
			if strings.Count(out, "\n") != 0 || !strings.Contains(out, c.flag) {
				t.Errorf("want one line naming %q, got:\n%s", c.flag, out)
			}
		})
	}
}

// grandchildScript starts a background grandchild, records both pids and
// waits; the grandchild is what a naive supervisor leaves behind.
func grandchildScript(dir string) string {
	return "sleep 1000 & echo $! > " + dir + "/gc.pid; echo $$ > " + dir + "/child.pid; wait"
}

func TestGracefulStopKillsWholeGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), grandchildScript(dir))...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	p.Signal(syscall.SIGTERM)
	code := p.Wait(10 * time.Second)
	if alive(child) || alive(gc) {
		t.Fatalf("after a graceful stop child alive=%v grandchild alive=%v", alive(child), alive(gc))
	}
	if code != 143 {
		t.Fatalf("exit %d, want 143 (the child's status: killed by SIGTERM)", code)
	}
}

func TestLossKillsWholeGroupAndExits123(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The child ignores SIGTERM, so only the SIGKILL of the timeline ends it.
	script := "trap '' TERM; " + grandchildScript(dir)
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), script)...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	// Replacing the lock file takes the key from under the leader.
	lock := filepath.Join(dir, "leaderrun", "k.lock")
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	code := p.Wait(15 * time.Second)
	took := time.Since(lostAt)
	if code != 123 {
		t.Fatalf("exit %d, want 123\n%s", code, p.Output())
	}
	if alive(child) || alive(gc) {
		t.Fatalf("after loss child alive=%v grandchild alive=%v", alive(child), alive(gc))
	}
	// It ignored SIGTERM, so it lived through the kill grace (1s).
	if took < time.Second {
		t.Fatalf("child died %v after the loss, before the kill grace ended: SIGTERM was not ignored?", took)
	}
	if !strings.Contains(p.Output(), "stopping child") {
		t.Fatalf("no stop line in the log:\n%s", p.Output())
	}
}

func TestKill9OfLeaderrunKillsChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/child.pid; while :; do sleep 1; done")...)
	child := readPID(t, dir+"/child.pid")
	p.Signal(syscall.SIGKILL)
	p.Wait(5 * time.Second)
	waitFor(t, 2*time.Second, "child to die after kill -9 of leaderrun", func() bool { return !alive(child) })
}

func TestForwardsSignalsToChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := "trap 'echo HUP >> " + dir + "/got' HUP; trap 'echo USR1 >> " + dir + "/got' USR1; " +
		"echo $$ > " + dir + "/child.pid; while :; do sleep 0.05; done"
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k"), script)...)
	readPID(t, dir+"/child.pid")
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1} {
		p.Signal(sig)
		name := map[syscall.Signal]string{syscall.SIGHUP: "HUP", syscall.SIGUSR1: "USR1"}[sig]
		waitFor(t, 5*time.Second, "child to receive "+name, func() bool {
			b, _ := os.ReadFile(dir + "/got")
			return strings.Contains(string(b), name)
		})
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)
}

func TestTermWhileWaitingEndsWithinOneSecond(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder := start(t, "holder", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/holder.pid; exec sleep 1000")...)
	readPID(t, dir+"/holder.pid")
	standby := start(t, "standby", nil, withCommand(localArgs(dir, "k"), "echo started > "+dir+"/standby")...)
	waitFor(t, 5*time.Second, "standby to campaign", func() bool { return strings.Contains(standby.Output(), "waiting for the holder") })
	sent := time.Now()
	standby.Signal(syscall.SIGTERM)
	code := standby.Wait(5 * time.Second)
	if took := time.Since(sent); took > time.Second {
		t.Fatalf("standby took %v to end after SIGTERM, want < 1s", took)
	}
	if code != 143 {
		t.Fatalf("standby exit %d, want 143", code)
	}
	if _, err := os.Stat(dir + "/standby"); err == nil {
		t.Fatal("the standby's child ran")
	}
	holder.Signal(syscall.SIGTERM)
	holder.Wait(10 * time.Second)
}

func TestStandbyTakesOverWithHigherEpoch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := func(name string) string {
		return "echo $LEADER_EPOCH > " + dir + "/" + name + ".epoch; exec sleep 1000"
	}
	first := start(t, "first", nil, withCommand(localArgs(dir, "k"), script("first"))...)
	e1 := readPID(t, dir+"/first.epoch")
	second := start(t, "second", nil, withCommand(localArgs(dir, "k"), script("second"))...)
	waitFor(t, 5*time.Second, "second to campaign", func() bool { return strings.Contains(second.Output(), "waiting for the holder") })
	if _, err := os.Stat(dir + "/second.epoch"); err == nil {
		t.Fatal("second child ran while the first led")
	}
	first.Signal(syscall.SIGKILL)
	first.Wait(5 * time.Second)
	e2 := readPID(t, dir+"/second.epoch")
	if e2 <= e1 {
		t.Fatalf("epoch after takeover %d, want > %d", e2, e1)
	}
	second.Signal(syscall.SIGTERM)
	second.Wait(10 * time.Second)
}

func TestRestartOnFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Fails twice, then succeeds: three runs, exit 0.
	script := "echo run >> " + dir + "/runs; [ $(wc -l < " + dir + "/runs) -ge 3 ]"
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k", "--restart", "on-failure", "--restart-delay", "50ms"), script)...)
	if code := p.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.Output())
	}
	b, _ := os.ReadFile(dir + "/runs")
	if n := strings.Count(string(b), "run"); n != 3 {
		t.Fatalf("child ran %d times, want 3", n)
	}
}

func TestChildEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"NOTIFY_SOCKET=/run/nope", "WATCHDOG_USEC=1000", "KEEP_ME=yes"}
	p := start(t, "leader", env, withCommand(localArgs(dir, "envkey", "--id", "me-1"), "env > "+dir+"/env")...)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Output())
	}
	b, err := os.ReadFile(dir + "/env")
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"LEADER_EPOCH=1\n", "LEADER_KEY=envkey\n", "LEADER_ID=me-1\n", "LEADERRUN_BACKEND=local\n", "KEEP_ME=yes\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("child env lacks %q", strings.TrimSpace(want))
		}
	}
	// NOTIFY_SOCKET is leaderrun's own socket for the job (no
	// --job-watchdog: no WATCHDOG_USEC).
	if strings.Contains(got, "NOTIFY_SOCKET=/run/nope") || !strings.Contains(got, "/leaderrun-notify-") {
		t.Errorf("child env lacks leaderrun's own NOTIFY_SOCKET")
	}
	if strings.Contains(got, "WATCHDOG_USEC=") {
		t.Errorf("child env has WATCHDOG_USEC without --job-watchdog")
	}
	if _, err := strconv.Atoi("1"); err != nil {
		t.Fatal(err)
	}
}

func TestReapsOrphansAsPID1(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("unshare (util-linux) is needed to run leaderrun as PID 1")
	}
	dir := t.TempDir()
	// In its own PID namespace leaderrun is PID 1: the orphan the child
	// leaves behind is re-parented to it and must be reaped, not left a
	// zombie. /proc is mounted for the namespace, so the child sees it.
	script := "( sleep 0.1 & echo $! > " + dir + "/orphan ); sleep 1; " +
		"p=$(cat " + dir + "/orphan); if [ -e /proc/$p ]; then grep State /proc/$p/status > " + dir + "/result; else echo reaped > " + dir + "/result; fi"
	args := append([]string{"--pid", "--fork", "--mount-proc", binary}, withCommand(localArgs(dir, "pid1"), script)...)
	cmd := exec.Command(unshare, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("leaderrun as PID 1: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(dir + "/result")
	if got := strings.TrimSpace(string(b)); got != "reaped" {
		t.Fatalf("orphan not reaped by leaderrun as PID 1: %q\n%s", got, out)
	}
}

func TestClosedStderrDoesNotKillLeaderrun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child outlives the reader of leaderrun's output, then checks that
	// its own SIGPIPE behaviour is the default one.
	script := "echo $$ > " + dir + "/child.pid; sleep 0.5; yes | head -1 > /dev/null; echo done > " + dir + "/done"
	cmd := exec.Command(binary, withCommand(localArgs(dir, "pipe"), script)...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close() // nobody reads leaderrun's output any more
	readPID(t, dir+"/child.pid")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leaderrun with a closed stderr: %v", err)
	}
	if _, err := os.Stat(dir + "/done"); err != nil {
		t.Fatal("the child did not finish")
	}
}
