package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// daemonizingJob double-forks a daemon that calls setsid, writes its pid to
// dir/job.pids and sleeps; the child itself sleeps too. envPrefix runs the
// daemon under env(1): "env -i " clears its environment, marker included,
// "env -u LEADER_KEY " drops only the key.
func daemonizingJob(dir, envPrefix string) string {
	p := filepath.Join(dir, "job.pids")
	return `(setsid ` + envPrefix + `sh -c 'echo $$ >> ` + p + `; exec sleep 1000' >/dev/null 2>&1 </dev/null &)
exec sleep 1000`
}

// killBoth SIGKILLs leaderrun's guard and leaderrun itself back to back, as
// `pkill -9 leaderrun` or an OOM kill of the group does, and waits until
// both are dead.
func killBoth(t *testing.T, p *Proc) {
	t.Helper()
	g := guardOf(t, p)
	// Both stopped first, so neither sees the other die: leaderrun would
	// start another guard, a guard would kill the job. A signal stops a
	// process only once one of its threads takes it, so wait until every
	// thread is stopped. Then the guard dies first: a stopped guard whose
	// leaderrun died would get SIGHUP and SIGCONT from the kernel (its
	// process group is orphaned) and do its work.
	for _, pid := range []int{g, p.Pid()} {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		waitFor(t, 5*time.Second, "every thread stopped", func() bool { return allStopped(pid) })
	}
	_ = syscall.Kill(g, syscall.SIGKILL)
	waitFor(t, 5*time.Second, "the guard to die", func() bool { return !alive(g) })
	p.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
}

// allStopped reports whether every thread of pid is stopped (T).
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// TestLeftoverOfKilledSupervisorsIsSweptBeforeTheNextChild: both supervisors
// of a job that daemonized are SIGKILLed; on the local backend the lock is
// free at once. The next leaderrun of the key — started afterwards (a
// restart), or a standby already waiting on the same host — must kill the
// daemon, wait until it is gone and say so, before its own child starts.
func TestLeftoverOfKilledSupervisorsIsSweptBeforeTheNextChild(t *testing.T) {
	for _, tc := range []struct {
		mode    contain.Mode
		env     string
		standby bool
	}{
		// Group mode finds the daemon by its marker, which carries the key:
		// the job may drop LEADER_KEY.
		{contain.Group, "env -u LEADER_KEY ", false},
		{contain.Group, "env -u LEADER_KEY ", true},
		// cgroup mode finds it by its job cgroup, marker or not.
		{contain.Cgroup, "env -i ", false},
		{contain.Cgroup, "env -i ", true},
	} {
		name := string(tc.mode) + "/restart"
		if tc.standby {
			name = string(tc.mode) + "/standby"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// The containment line of cgroup mode is at debug level.
			args := localArgs(dir, "k", "--contain", string(tc.mode), "--log-level", "debug")
			a := start(t, "A", nil, withCommand(args, daemonizingJob(dir, tc.env))...)
			daemon := jobPids(t, dir, 1)[0]
			t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
			if !strings.Contains(a.Output(), "mode="+string(tc.mode)) {
				t.Fatalf("containment mode %s not in force:\n%s", tc.mode, a.Output())
			}
			var b *Proc
			if tc.standby {
				b = start(t, "B", nil, withCommand(args, checkingJob(dir))...)
				waitFor(t, 10*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
			}
			killBoth(t, a)
			if !tc.standby {
				if !contain.ProcessAlive(daemon) {
					t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
				}
				b = start(t, "B", nil, withCommand(args, checkingJob(dir))...)
			}
			nextLeaderSwept(t, b, dir, daemon, "daemon")
		})
	}
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 && f[3] == "/" {
			return f[4]
		}
	}
	t.Skip("no cgroup v2 hierarchy")
	return ""
}

// delegatedCgroup makes a cgroup for one leaderrun to start in, as a unit
// with Delegate=yes gives it: leaderrun moves into a leaf of its own there
// and makes its job cgroups beside it. It is removed after the test.
func delegatedCgroup(t *testing.T) (root, dir string) {
	t.Helper()
	root = cgroup2Root(t)
	dir = filepath.Join(root, fmt.Sprintf("leaderrun-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		for range 100 {
			contain.RemoveTree(dir)
			if _, err := os.Stat(dir); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cgroup %s still there", dir)
	})
	return root, dir
}

// startIn runs leaderrun bin with args, started straight into cgroup dir
// (clone3), as user uid unless 0.
func startIn(t *testing.T, name, dir string, uid int, bin string, args ...string) *Proc {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if uid != 0 {
		cmd.Env = append(cmd.Env, "HOME="+filepath.Dir(bin))
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	return launch(t, name, cmd)
}

// intrudingJob moves a process of the job into the cgroup of its parent,
// leaderrun, and writes its pid to dir/intruder.pid; a job run as
// leaderrun's user owns that cgroup in a delegated subtree. With stay it
// then keeps running, else it exits 0.
func intrudingJob(root, dir string, stay bool) string {
	end := "exit 0"
	if stay {
		end = "exec sleep 1000"
	}
	return `sleep 1000 >/dev/null 2>&1 &
p=$!
echo $p > ` + root + `$(sed -n 's/^0:://p' /proc/$PPID/cgroup)/cgroup.procs || exit 9
echo $p > ` + dir + `/intruder.pid
` + end
}

// wantWarnedPid asserts that a warning line of out names pid.
func wantWarnedPid(t *testing.T, out string, pid int) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "[WARN]") && strings.Contains(line, strconv.Itoa(pid)+" (") {
			return
		}
	}
	t.Errorf("no warning names process %d and its command, as \"%d (sleep)\":\n%s", pid, pid, out)
}

// nextLeaderSwept waits for the next leader b's child (a checkingJob in
// dir) and checks that the old job's process pid, which the child calls
// what, was gone when that child started, is gone now, and was named in a
// warning; then it stops b.
func nextLeaderSwept(t *testing.T, b *Proc, dir string, pid int, what string) {
	t.Helper()
	waitFor(t, 15*time.Second, "the next leader's child to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "next.started"))
		return err == nil
	})
	if got, err := os.ReadFile(filepath.Join(dir, "alive-at-start")); err == nil {
		t.Fatalf("the old job's %s ran when the next leader's child started: %s\n%s", what, strings.Fields(string(got)), b.Output())
	}
	if contain.ProcessAlive(pid) {
		t.Errorf("the old job's %s %d still runs", what, pid)
	}
	wantWarnedPid(t, b.Output(), pid)
	b.Signal(syscall.SIGTERM)
	b.Wait(15 * time.Second)
}

// asUser copies leaderrun and its guard where uid may run them, gives uid
// the cgroup dir cg unless "" (as systemd's Delegate=yes does for User=)
// and a lock directory, and returns the binary and that directory.
func asUser(t *testing.T, uid int, cg string) (bin, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "leaderrun-e2e-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Mkdir(dir+"/bin", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{binary, guardBinary} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", filepath.Base(src)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	owned := []string{dir}
	if cg != "" {
		owned = append(owned, cg, cg+"/cgroup.procs", cg+"/cgroup.threads", cg+"/cgroup.subtree_control")
	}
	for _, p := range owned {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "bin", "leaderrun"), dir
}

// TestProcessMovedIntoLeaderrunsCgroupDiesWithTheJob: in a delegated cgroup a
// job of leaderrun's own user may move a process out of its job cgroup into
// leaderrun's leaf. Once the job ends that process is killed and named: by
// leaderrun when the child exits or is stopped, by the guard when leaderrun
// is killed.
func TestProcessMovedIntoLeaderrunsCgroupDiesWithTheJob(t *testing.T) {
	const (
		exits    = "child exits"
		stopped  = "graceful stop"
		killed   = "leaderrun killed"
		asNobody = 65534
	)
	for _, tc := range []struct {
		end string
		uid int // leaderrun's and the job's user; 0 leaves it root
	}{{exits, 0}, {exits, asNobody}, {stopped, 0}, {killed, 0}} {
		name := tc.end
		if tc.uid != 0 {
			name += ", leaderrun and job as nobody"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			root, cg := delegatedCgroup(t)
			bin := binary
			if tc.uid != 0 {
				bin, dir = asUser(t, tc.uid, cg)
			}
			// The containment line of cgroup mode is at debug level.
			args := localArgs(dir, "k", "--contain", "cgroup", "--log-level", "debug")
			// Unless it exits, the child stays the moved process's parent.
			p := startIn(t, "A", cg, tc.uid, bin, withCommand(args, intrudingJob(root, dir, tc.end != exits))...)
			intruder := readPID(t, filepath.Join(dir, "intruder.pid"))
			t.Cleanup(func() { _ = syscall.Kill(intruder, syscall.SIGKILL) })
			// Its output is read as it comes: the job may have written
			// its pid before the containment line was read.
			waitFor(t, 10*time.Second, "leaderrun to take the delegated cgroup", func() bool { return strings.Contains(p.Output(), "delegated") })
			want := 0
			switch tc.end {
			case killed:
				g := guardOf(t, p)
				p.Signal(syscall.SIGKILL)
				p.Wait(10 * time.Second)
				waitFor(t, 10*time.Second, "the guard to finish", func() bool { return !alive(g) })
			case stopped:
				p.Signal(syscall.SIGTERM)
				want = 143
			}
			if tc.end != killed {
				if code := p.Wait(15 * time.Second); code != want {
					t.Fatalf("exit %d, want %d\n%s", code, want, p.Output())
				}
			}
			if contain.ProcessAlive(intruder) {
				t.Fatalf("process %d, moved into leaderrun's cgroup, outlived the job\n%s", intruder, p.Output())
			}
			wantWarnedPid(t, p.Output(), intruder)
		})
	}
}

// TestLeftoverSweptAtStartWhileTheLeaseLingers: on etcd a dead leader's
// lease outlives it by its TTL, so the leaderrun restarted on its host
// waits. The daemon its dead predecessor left must die when that
// leaderrun starts, not only once it wins (DESIGN §1.9).
func TestLeftoverSweptAtStartWhileTheLeaseLingers(t *testing.T) {
	t.Parallel()
	c := testcluster.StartEtcd(t, 1)
	dir := t.TempDir()
	args := []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints(), ","), "--key", newKey("linger"),
		"--ttl", "10s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "1s",
		"--contain", "group", "--log-level", "debug"}
	a := start(t, "A", nil, withCommand(args, daemonizingJob(dir, "env -u LEADER_KEY "))...)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	killBoth(t, a)
	if !contain.ProcessAlive(daemon) {
		t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
	}
	b := start(t, "B", nil, withCommand(args, "exec sleep 1000")...)
	waitFor(t, 5*time.Second, "the daemon to die", func() bool { return !contain.ProcessAlive(daemon) })
	if strings.Contains(b.Output(), "acquired") {
		t.Fatalf("B acquired before the dead leader's 10s lease expired; the test needs it to wait:\n%s", b.Output())
	}
	waitFor(t, 5*time.Second, "a warning naming the leftover", func() bool {
		return strings.Contains(b.Output(), "leftover") && strings.Contains(b.Output(), strconv.Itoa(daemon))
	})
	b.Signal(syscall.SIGTERM)
	b.Wait(15 * time.Second)
}

// TestLeftoverForkRelaySweptBeforeTheNextChild: the job left by a leaderrun
// killed with its guard is a relay of processes that each fork and exit
// within a millisecond or a few (ForkRelay), every one carrying the job's
// marker. At any instant one of them lives, but almost never the one a
// scan of /proc listed. The next leaderrun of the key must still kill it
// before its own child starts: the relay's heartbeat file must not grow
// while that child runs.
func TestLeftoverForkRelaySweptBeforeTheNextChild(t *testing.T) {
	prog, err := testsupport.ForkRelay()
	if err != nil {
		t.Fatalf("build the fork relay: %v", err)
	}
	for _, us := range []string{"1000", "5000"} {
		t.Run(us+"us", func(t *testing.T) {
			dir := t.TempDir()
			relayLeftoverSwept(t, dir, filepath.Join(dir, "beat"), "", prog+" 1 "+us+" 15 ")
		})
	}
}

// relayLeftoverSwept starts, as the job of a leaderrun A in group mode in
// dir, the relay cmd (prefix, then the program and its arguments but the
// heartbeat file beat), kills A and its guard together, and checks that
// the next leaderrun's child started only once the relay was gone: its
// heartbeat must not grow while that child runs.
func relayLeftoverSwept(t *testing.T, dir, beat, prefix, cmd string) {
	t.Helper()
	args := localArgs(dir, "k", "--contain", "group")
	relay := prefix + cmd + beat + " </dev/null >/dev/null 2>&1 &\nexec sleep 1000"
	a := start(t, "A", nil, withCommand(args, relay)...)
	t.Cleanup(func() {
		// A relay that escaped stops on its own after 15s; do
		// not leave it to the tests that follow.
		for end := time.Now().Add(20 * time.Second); testsupport.Growing(beat, 100*time.Millisecond) && time.Now().Before(end); {
		}
	})
	waitFor(t, 10*time.Second, "the relay to run", func() bool { return testsupport.Growing(beat, 100*time.Millisecond) })
	killBoth(t, a)
	if !testsupport.Growing(beat, 200*time.Millisecond) {
		t.Fatal("the relay died with its supervisors: nothing left to sweep")
	}
	check := `a=$(wc -c < ` + beat + `); sleep 0.3; b=$(wc -c < ` + beat + `)
echo "$a $b" > ` + dir + `/beat-at-start
exec sleep 1000`
	b := start(t, "B", nil, withCommand(args, check)...)
	var sizes []string
	waitFor(t, 15*time.Second, "the next leader's child to look at the relay", func() bool {
		got, _ := os.ReadFile(filepath.Join(dir, "beat-at-start"))
		sizes = strings.Fields(string(got))
		return len(sizes) == 2
	})
	if sizes[0] != sizes[1] {
		t.Errorf("the old job's relay ran while the next leader's child ran (heartbeat %s -> %s bytes)\n%s", sizes[0], sizes[1], b.Output())
	}
	if !strings.Contains(b.Output(), "leftover") {
		t.Errorf("no warning of a leftover job:\n%s", b.Output())
	}
	b.Signal(syscall.SIGTERM)
	b.Wait(15 * time.Second)
}

// TestDaemonWithExitedMainThreadKilled: a daemon of the job (setsid, so out
// of the job's process group) whose main thread has exited while another
// thread runs shows no environment in /proc/PID/environ, marker included;
// its live thread's /proc/PID/task/TID/environ still holds it. Once
// leaderrun is dead nothing else ties the daemon to the job. The guard of
// a leaderrun killed alone must kill it before it unlocks; with both
// killed, the next leaderrun of the key must kill it before its child
// starts. Liveness by /proc, every thread.
func TestDaemonWithExitedMainThreadKilled(t *testing.T) {
	zm := zombieMain(t)
	for _, end := range []string{"guard", "sweep"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := localArgs(dir, "k", "--contain", "group")
			job := `(setsid ` + zm + ` ` + dir + `/job.pids </dev/null >/dev/null 2>&1 &)
exec sleep 1000`
			a := start(t, "A", nil, withCommand(args, job)...)
			daemon := jobPids(t, dir, 1)[0]
			t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
			waitFor(t, 5*time.Second, "the daemon's main thread to exit", func() bool {
				st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", daemon))
				i := strings.LastIndexByte(string(st), ')')
				return err == nil && i > 0 && i+2 < len(st) && st[i+2] == 'Z'
			})
			if end == "guard" {
				g := guardOf(t, a)
				a.Signal(syscall.SIGKILL)
				a.Wait(10 * time.Second)
				waitFor(t, 10*time.Second, "the guard to finish", func() bool { return !alive(g) })
				if contain.ProcessAlive(daemon) {
					t.Fatalf("the guard let go of the lock while the job's daemon %d runs\n%s", daemon, a.Output())
				}
				return
			}
			killBoth(t, a)
			if !contain.ProcessAlive(daemon) {
				t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
			}
			b := start(t, "B", nil, withCommand(args, checkingJob(dir))...)
			nextLeaderSwept(t, b, dir, daemon, "daemon")
		})
	}
}

// TestNestedLeaderrunOfTheSameKeySweepsItsSiblings: a job runs leaderrun
// for its own key, which waits as a standby and carries the job's marker.
// When the outer leaderrun and its guard are killed together, the inner
// one wins, and the old job's other processes are leftovers like any
// others: its sweep must kill the daemon beside it before its child
// starts, though the daemon carries the marker the inner leaderrun carries
// itself. The inner leaderrun itself, its own children and its ancestors
// are spared.
func TestNestedLeaderrunOfTheSameKeySweepsItsSiblings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := localArgs(dir, "k", "--contain", "group")
	script := filepath.Join(dir, "inner.sh")
	if err := os.WriteFile(script, []byte("echo $PPID > "+dir+"/inner.pid\n"+checkingJob(dir)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inner := binary + " " + strings.Join(args, " ") + " -- sh " + script
	job := `(setsid sh -c 'echo $$ >> ` + dir + `/job.pids; exec sleep 1000' </dev/null >/dev/null 2>&1 &)
` + inner + ` </dev/null >/dev/null 2>` + dir + `/inner.log &
exec sleep 1000`
	a := start(t, "A", nil, withCommand(args, job)...)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	waitFor(t, 10*time.Second, "the inner leaderrun to campaign", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "inner.log"))
		return strings.Contains(string(b), "waiting for the holder")
	})
	killBoth(t, a)
	waitFor(t, 15*time.Second, "the inner leader's child to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "next.started"))
		return err == nil
	})
	in := readPID(t, filepath.Join(dir, "inner.pid"))
	t.Cleanup(func() {
		_ = syscall.Kill(in, syscall.SIGTERM)
		waitFor(t, 15*time.Second, "the inner leaderrun to exit", func() bool { return !alive(in) })
	})
	out, _ := os.ReadFile(filepath.Join(dir, "inner.log"))
	if got, err := os.ReadFile(filepath.Join(dir, "alive-at-start")); err == nil {
		t.Fatalf("the old job's daemon ran when the inner leader's child started: %s\n%s", strings.Fields(string(got)), out)
	}
	if contain.ProcessAlive(daemon) {
		t.Errorf("the old job's daemon %d still runs", daemon)
	}
	wantWarnedPid(t, string(out), daemon)
}

// TestIntruderInDeadLeaderrunsCgroupSwept: in a delegated cgroup a job
// moves a process, its environment cleared, into leaderrun's own leaf;
// then leaderrun and its guard are killed together. The next leaderrun of
// the key in that cgroup must kill it before its child starts: the dead
// leaderrun's job cgroup beside the leaf names the key. A leaderrun of
// another key there must leave it alone.
func TestIntruderInDeadLeaderrunsCgroupSwept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, cg := delegatedCgroup(t)
	args := localArgs(dir, "k", "--contain", "cgroup", "--log-level", "debug")
	job := `env -i sleep 1000 </dev/null >/dev/null 2>&1 &
p=$!
echo $p > ` + root + `$(sed -n 's/^0:://p' /proc/$PPID/cgroup)/cgroup.procs || exit 9
echo $p > ` + dir + `/job.pids
exec sleep 1000`
	a := startIn(t, "A", cg, 0, binary, withCommand(args, job)...)
	intruder := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(intruder, syscall.SIGKILL) })
	if !strings.Contains(a.Output(), "delegated") {
		t.Fatalf("leaderrun did not take the delegated cgroup:\n%s", a.Output())
	}
	killBoth(t, a)
	if !contain.ProcessAlive(intruder) {
		t.Fatalf("the intruder %d died with its supervisors: nothing left to sweep", intruder)
	}
	other := startIn(t, "other key", cg, 0, binary, withCommand(localArgs(dir, "other", "--contain", "cgroup"), "echo started > "+dir+"/other.started; exec sleep 1000")...)
	waitFor(t, 15*time.Second, "the other key's child to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "other.started"))
		return err == nil
	})
	if !contain.ProcessAlive(intruder) {
		t.Fatalf("a leaderrun of another key killed the intruder %d of this key's job\n%s", intruder, other.Output())
	}
	other.Signal(syscall.SIGTERM)
	other.Wait(15 * time.Second)
	b := startIn(t, "B", cg, 0, binary, withCommand(args, checkingJob(dir))...)
	nextLeaderSwept(t, b, dir, intruder, "intruder")
}

// TestGuardKillsForkRelayOfItsDeadLeaderrun: leaderrun alone is SIGKILLed
// while its job is a relay of processes that each fork and exit within a
// fraction of a millisecond (ForkRelay), none of them a child of anyone
// the guard knows: only their marker ties them to the job. The guard must
// kill the relay before it unlocks, not judge the job gone because each
// process it read with the marker was gone by the end of the scan.
func TestGuardKillsForkRelayOfItsDeadLeaderrun(t *testing.T) {
	prog, err := testsupport.ForkRelay()
	if err != nil {
		t.Fatalf("build the fork relay: %v", err)
	}
	for _, us := range []string{"200", "100"} {
		t.Run(us+"us", func(t *testing.T) {
			dir := t.TempDir()
			beat := filepath.Join(dir, "beat")
			relay := prog + " 1 " + us + " 15 " + beat + " </dev/null >/dev/null 2>&1 &\nexec sleep 1000"
			a := start(t, "A", nil, withCommand(localArgs(dir, "k", "--contain", "group"), relay)...)
			t.Cleanup(func() {
				for end := time.Now().Add(20 * time.Second); testsupport.Growing(beat, 100*time.Millisecond) && time.Now().Before(end); {
				}
			})
			waitFor(t, 10*time.Second, "the relay to run", func() bool { return testsupport.Growing(beat, 100*time.Millisecond) })
			g := guardOf(t, a)
			a.Signal(syscall.SIGKILL)
			a.Wait(10 * time.Second)
			waitFor(t, 15*time.Second, "the guard to finish", func() bool { return !alive(g) })
			if testsupport.Growing(beat, 300*time.Millisecond) {
				t.Fatalf("the guard finished while the job's relay runs\n%s", a.Output())
			}
		})
	}
}

// TestLeftoverStartedAfterTheStandbysSweepIsSwept: a standby's term sweeps
// in full only when something of the key could have been left since its
// own sweep (the registry of live jobs, contain/registry.go). Here the
// leftover comes after that sweep: leader A's job daemonizes only once
// standby B is waiting (swept at its start, A then alive), then A and its
// guard are killed together. B must kill the daemon, and say so, before
// its own child starts: on etcd once A's lease expires, on the local
// backend at once.
func TestLeftoverStartedAfterTheStandbysSweepIsSwept(t *testing.T) {
	eps := strings.Join(testcluster.StartEtcd(t, 1).Endpoints(), ",")
	for _, tc := range []struct {
		backend string
		mode    contain.Mode
	}{
		{"etcd", contain.Group},
		{"etcd", contain.Cgroup},
		{"local", contain.Group},
	} {
		t.Run(tc.backend+"/"+string(tc.mode), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{"--backend", "etcd", "--etcd-endpoints", eps, "--key", newKey("after-sweep"),
				"--ttl", "3s", "--renew-interval", "1s", "--kill-grace", "1s", "--safety-margin", "500ms"}
			if tc.backend == "local" {
				args = localArgs(dir, "k")
			}
			args = append(args, "--contain", string(tc.mode), "--log-level", "debug")
			later := `while [ ! -e ` + dir + `/go ]; do sleep 0.05; done
` + daemonizingJob(dir, "env -u LEADER_KEY ")
			a := start(t, "A", nil, withCommand(args, later)...)
			waitFor(t, 15*time.Second, "A's child to start", func() bool { return strings.Contains(a.Output(), "child started") })
			if !strings.Contains(a.Output(), "mode="+string(tc.mode)) {
				t.Fatalf("containment mode %s not in force:\n%s", tc.mode, a.Output())
			}
			b := start(t, "B", nil, withCommand(args, checkingJob(dir))...)
			// B swept before it campaigned.
			waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
			testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
			daemon := jobPids(t, dir, 1)[0]
			t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
			killBoth(t, a)
			if !contain.ProcessAlive(daemon) {
				t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
			}
			nextLeaderSwept(t, b, dir, daemon, "daemon")
		})
	}
}
