package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Attacks by another local user, with no privilege, on the sweep of
// leftover jobs of root's leaderrun (SAFETY.md, "Other local users").

// forgedMarker runs root's job once under args (cgroup mode), reads its
// cgroup as nobody, as any user can, and returns marker values naming the
// same key and a leaderrun that does not exist: without a seal, and with
// a seal nobody made up — what any user can put in the environment of a
// process of their own.
func forgedMarker(t *testing.T, dir string, args []string) []string {
	t.Helper()
	pidFile := filepath.Join(dir, "job.pid")
	first := start(t, "root's first run", nil, withCommand(args, "echo $$ > "+pidFile+"; exec sleep 1000")...)
	pid := readPID(t, pidFile)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", "/proc/"+strconvItoa(int64(pid))+"/cgroup").Output()
	if err != nil {
		t.Fatalf("nobody reading /proc/%d/cgroup: %v", pid, err)
	}
	first.Signal(syscall.SIGTERM)
	if code := first.Wait(30 * time.Second); code != 143 && code != 0 {
		t.Fatalf("root's first run: exit %d\n%s", code, first.Output())
	}
	_, tok, ok := strings.Cut(strings.TrimSpace(string(out)), "/job.")
	f := strings.Split(tok, ".")
	if !ok || len(f) != 6 {
		t.Fatalf("root's job has no job cgroup to read its token from (group mode?): %q", out)
	}
	// The PID namespace and the key's hash kept, a leaderrun pid that
	// does not exist.
	return []string{
		contain.EnvMarker + "=4194000.1.1.1." + f[4] + "." + f[5],
		contain.EnvMarker + "=4194000.1-0123456789abcdef01234567.1.1." + f[4] + "." + f[5],
	}
}

// TestLocalOtherUserForgedMarkerIsNotKilled: the key's part of a job
// marker is no secret (the job's cgroup is named after its token, and
// /proc/PID/cgroup is readable by every user), so nobody, after reading it
// once from a job of root's, starts processes of its own with a marker
// naming the key and a dead leaderrun. Root's next leaderrun of the key
// must neither kill them nor take them for leftovers (DESIGN §1.9: a
// marker without a good seal counts only on leaderrun's own user's
// processes).
func TestLocalOtherUserForgedMarkerIsNotKilled(t *testing.T) {
	dir := t.TempDir()
	args := localArgs(dir, newKey("forged"), "--contain", "cgroup")
	var others []*exec.Cmd
	for _, forged := range forgedMarker(t, dir, args) {
		other := testsupport.StartAsNobody(t, "env", "-i", forged, "/bin/sleep", "1000")
		others = append(others, other)
	}
	time.Sleep(200 * time.Millisecond) // env has exec'd sleep
	p := start(t, "root's leaderrun", nil, withCommand(args, "true")...)
	code := p.Wait(60 * time.Second)
	for _, other := range others {
		if !alive(other.Process.Pid) {
			t.Errorf("nobody's sleep with a forged marker was killed by root's leaderrun")
		}
	}
	if code != 0 || strings.Contains(p.Output(), "leftover") {
		t.Fatalf("root's leaderrun beside nobody's sleeps with forged markers: exit %d, want 0 and no word of a leftover\n%s", code, p.Output())
	}
}

// TestLocalOtherUserForgedMarkerBlocksJob: with the forged marker of
// TestLocalOtherUserForgedMarkerIsNotKilled nobody keeps a few sleeps
// running, starting another as soon as one is killed. Taken for
// leftovers, they kept every sweep from finishing ("processes of leftover
// jobs still alive"), and root's leaderrun started nothing and exited 125,
// term after term; root's job must run.
func TestLocalOtherUserForgedMarkerBlocksJob(t *testing.T) {
	respawn, err := testsupport.Respawn()
	if err != nil {
		t.Fatalf("build the respawning program: %v", err)
	}
	dir := t.TempDir()
	args := localArgs(dir, newKey("forged"), "--contain", "cgroup")
	forged := forgedMarker(t, dir, args)[0]

	testsupport.StartAsNobody(t, respawn, "120", "16", forged)
	time.Sleep(500 * time.Millisecond)

	rootJobRuns(t, dir, args, "nobody's respawned sleeps with a forged marker")
}

// TestLocalOtherUserZombieChurnBlocksJob: the sweep of leftover jobs ends
// only after two scans of /proc in a row in which no process vanished and
// no zombie appeared since the scan before. Nobody, knowing nothing of
// root's key, keeps a few processes forking children that exit at once
// and reaping them a moment later. When another user's zombies counted,
// no two scans in a row saw the same zombies, every sweep ended after
// SweepTimeout with "leftover jobs not seen gone", and root's leaderrun
// started nothing and exited 125, term after term; root's job must run.
//
// Root's own processes die too on a busy host (a build's compilers, a
// shell's commands), each a zombie until its parent reaps it, and nobody's
// churn, slowing every scan, widened the window in which one appears:
// a CI run saw root's go build unsettle every scan. Root runs such a churn
// here as well, and one whose children each make a process group of their
// own, as the jobs of root's other leaderruns do (a later CI run: other
// tests' jobs exiting kept every scan unsettled). Neither can stand for a
// leftover's dying process while no pid was handed out twice between two
// scans (contain/leftover.go, pidCursor).
func TestLocalOtherUserZombieChurnBlocksJob(t *testing.T) {
	churn, err := testsupport.ZombieChurn()
	if err != nil {
		t.Fatalf("build the zombie churn: %v", err)
	}
	testsupport.StartAsNobody(t, churn, "200", "120", "6")
	testsupport.StartInGroup(t, exec.Command(churn, "2000", "120", "2"))
	testsupport.StartInGroup(t, exec.Command(churn, "5000", "120", "1", "group"))
	time.Sleep(500 * time.Millisecond)

	dir := t.TempDir()
	rootJobRuns(t, dir, localArgs(dir, newKey("churn")), "nobody's zombie churn")
}

// TestLeftoverThatSwitchedUserIsSwept: a job of root's may switch to
// another user in place (setpriv, runuser, gosu), keeping its marker.
// With its leaderrun and guard both killed, in group mode nothing but the
// marker ties it to its key: the next leaderrun must still kill it before
// its child starts, a daemon as well as a relay whose every hop lives a
// millisecond, though it runs as another user (its marker is sealed, and
// its dead hops count while the sweep settles). Counting markers only on
// leaderrun's own user's processes left both running, 6 times in 6.
func TestLeftoverThatSwitchedUserIsSwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to switch user")
	}
	const switchUser = "setpriv --reuid=65534 --regid=65534 --clear-groups "
	t.Run("daemon", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		args := localArgs(dir, "k", "--contain", "group")
		job := `(setsid sh -c 'echo $$ >> ` + dir + `/job.pids; exec ` + switchUser + `sleep 1000' >/dev/null 2>&1 </dev/null &)
exec sleep 1000`
		a := start(t, "A", nil, withCommand(args, job)...)
		daemon := jobPids(t, dir, 1)[0]
		t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
		waitFor(t, 5*time.Second, "the daemon to run as nobody", func() bool {
			st, err := os.Stat("/proc/" + strconvItoa(int64(daemon)))
			return err == nil && st.Sys().(*syscall.Stat_t).Uid == testsupport.Nobody
		})
		killBoth(t, a)
		if !contain.ProcessAlive(daemon) {
			t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
		}
		b := start(t, "B", nil, withCommand(args, checkingJob(dir))...)
		nextLeaderSwept(t, b, dir, daemon, "daemon")
	})
	t.Run("relay", func(t *testing.T) {
		t.Parallel()
		prog, err := testsupport.ForkRelay()
		if err != nil {
			t.Fatalf("build the fork relay: %v", err)
		}
		if err := os.Chmod(filepath.Dir(prog), 0o755); err != nil {
			t.Fatal(err)
		}
		dir, shared := t.TempDir(), testsupport.SharedDir(t)
		relayLeftoverSwept(t, dir, filepath.Join(shared, "beat"), switchUser, prog+" 1 1000 15 ")
	})
}

// setuidRootProgram is a set-user-ID-root program on this host that any
// user may run and that exits at once with --version, or "".
func setuidRootProgram() string {
	for _, p := range []string{"/usr/bin/mount", "/bin/mount", "/usr/bin/umount", "/bin/umount"} {
		st, err := os.Stat(p)
		if err == nil && st.Mode()&os.ModeSetuid != 0 && st.Mode()&0o001 != 0 && st.Sys().(*syscall.Stat_t).Uid == 0 {
			return p
		}
	}
	return ""
}

// TestLocalOtherUserSetuidZombieChurnBlocksJob: the churn of
// TestLocalOtherUserZombieChurnBlocksJob, but nobody's children run a
// set-user-ID-root program that exits at once (mount --version). Their
// zombies' effective uid is root's, leaderrun's own, so they counted as
// deaths of processes that could have been a leftover's: no two scans in
// a row settled, every sweep ended after SweepTimeout with "leftover jobs
// not seen gone", and root's leaderrun started nothing and exited 125,
// term after term, though nothing of its key ever ran. Root's job must
// run. (A process's real uid is who started it: nobody cannot make a
// process whose real uid is root's.)
func TestLocalOtherUserSetuidZombieChurnBlocksJob(t *testing.T) {
	suid := setuidRootProgram()
	if suid == "" {
		t.Skip("no set-user-ID-root mount or umount to run as another user")
	}
	churn, err := testsupport.ExecChurn()
	if err != nil {
		t.Fatalf("build the churn: %v", err)
	}
	testsupport.StartAsNobody(t, churn, "3000", "60", "3", suid, "--version")
	time.Sleep(500 * time.Millisecond)

	dir := t.TempDir()
	rootJobRuns(t, dir, localArgs(dir, newKey("suidchurn")), "nobody's churn of set-user-ID-root zombies")
}

// TestLocalSealCopiedByJobsUserBlocksJob: one term of root's job runs a
// step as nobody (setpriv, runuser), and nobody reads the sealed marker
// from that step's environment, as a user may read their own processes'.
// The term ends normally; its leaderrun is dead, so the marker names a
// dead leaderrun of the key for good, and its seal is good. Nobody then
// keeps a few sleeps running with that marker, starting another as soon
// as one is killed. Every later sweep of the key kills them as leftovers
// and waits for them to be gone, which never happens: root's leaderrun
// starts nothing and exits 125, term after term, long after that step
// and that job are over. Root's job must run.
//
// The seal proves that root's leaderrun made the marker, not that the
// process carrying it descends from that job. But the jobs of a key on a
// host run one after another, so once a job is seen gone every job of the
// key no younger is over: another user's process whose sealed token is no
// younger than the youngest job seen gone is no leftover (contain/seal.go).
// A replay works only between a leaderrun's SIGKILL (with its guard's)
// and the next job of its key.
func TestLocalSealCopiedByJobsUserBlocksJob(t *testing.T) {
	respawn, dir, copied := replaySetup(t)
	args := localArgs(dir, newKey("replay"), "--contain", "group")
	first := start(t, "root's first term", nil, withCommand(args, copyMarkerAsNobody(copied))...)
	if code := first.Wait(30 * time.Second); code != 0 {
		t.Fatalf("root's first term: exit %d\n%s", code, first.Output())
	}

	testsupport.StartAsNobody(t, respawn, "120", "16", copiedMarker(t, copied))
	time.Sleep(500 * time.Millisecond)

	rootJobRuns(t, dir, args, "nobody's respawned sleeps with a sealed marker copied from a finished term")
}

// replaySetup is what a replay test needs: the respawning program, a
// directory of root's for the runs, and the file in a directory every user
// may write where nobody leaves the marker it copied.
func replaySetup(t *testing.T) (respawn, dir, copied string) {
	t.Helper()
	respawn, err := testsupport.Respawn()
	if err != nil {
		t.Fatalf("build the respawning program: %v", err)
	}
	if _, err := exec.LookPath("setpriv"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv, to run a step as nobody")
	}
	return respawn, t.TempDir(), filepath.Join(testsupport.SharedDir(t), "marker")
}

// copyMarkerAsNobody is a shell step, run by root's job or health check,
// that switches to nobody and writes the job marker of its environment to
// the file copied, as that user may read it from any process of theirs.
func copyMarkerAsNobody(copied string) string {
	return `setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'grep -z "^` + contain.EnvMarker + `=" /proc/self/environ | tr -d "\000" > ` + copied + `'`
}

// copiedMarker is the sealed marker copyMarkerAsNobody wrote, VAR=value.
func copiedMarker(t *testing.T, copied string) string {
	t.Helper()
	m, err := os.ReadFile(copied)
	if err != nil || !strings.HasPrefix(string(m), contain.EnvMarker+"=") || !strings.Contains(string(m), "-") {
		t.Fatalf("nobody did not read a sealed marker from its step: %q %v", m, err)
	}
	return strings.TrimSpace(string(m))
}

// TestLocalSealCopiedFromHealthCheckBlocksJob: as
// TestLocalSealCopiedByJobsUserBlocksJob, but nobody copies the sealed
// marker from a step of root's health check (--health-cmd), which runs as
// nobody, and replays it once that leaderrun has exited normally. A
// check's token was never judged against the jobs seen over (a standby's
// checks run beside the leader's job), so every later sweep of the key
// killed the respawned sleeps as what a check left running and never saw
// them gone: root's leaderrun started nothing and exited 125, term after
// term, for as long as nobody kept them up. Root's job must run.
func TestLocalSealCopiedFromHealthCheckBlocksJob(t *testing.T) {
	respawn, dir, copied := replaySetup(t)
	args := localArgs(dir, newKey("checkreplay"), "--contain", "group")
	first := start(t, "root's run with a health check", nil,
		withCommand(append(slices.Clip(args), "--health-cmd", copyMarkerAsNobody(copied)), "exit 0")...)
	if code := first.Wait(30 * time.Second); code != 0 {
		t.Fatalf("root's run with a health check: exit %d\n%s", code, first.Output())
	}
	m := copiedMarker(t, copied)
	if tok := strings.TrimPrefix(m, contain.EnvMarker+"="); !contain.IsCheckToken(tok) {
		t.Fatalf("the copied marker is not a health check's: %q", m)
	}

	testsupport.StartAsNobody(t, respawn, "120", "16", m)
	time.Sleep(500 * time.Millisecond)

	rootJobRuns(t, dir, args, "nobody's respawned sleeps with a sealed marker copied from a health check")
}

// rootJobRuns runs root's leaderrun under args with a job that leaves a
// mark in dir, and fails unless it exits 0 having run the job, beside what
// another user does (said by beside).
func rootJobRuns(t *testing.T, dir string, args []string, beside string) {
	t.Helper()
	ran := filepath.Join(dir, "ran")
	p := start(t, "root's leaderrun", nil, withCommand(args, "echo yes > "+ran)...)
	code := p.Wait(90 * time.Second)
	b, _ := os.ReadFile(ran)
	if code != 0 || strings.TrimSpace(string(b)) != "yes" {
		t.Fatalf("root's leaderrun beside %s: exit %d, job ran: %v; want 0 and the job run\n%s", beside, code, len(b) > 0, p.Output())
	}
}

// TestLocalSealReplayedDuringHealthCheckBlocksJob: nobody copies each
// health check's sealed marker while the check's step runs as nobody, and
// starts respawning sleeps with it at once. In group mode a process
// carrying a check's marker is the check's, so the check's kill never saw
// it gone (about 2s, then a warning); marked over only once seen gone, no
// check of that leaderrun was, and once it had exited every later sweep
// killed the copies as what its checks left running and never saw them
// gone: root's leaderrun started nothing and exited 125, term after term.
// A check is marked over once its leaderrun is done with it, seen gone or
// not (contain/seal.go). Root's job must run.
func TestLocalSealReplayedDuringHealthCheckBlocksJob(t *testing.T) {
	respawn, dir, copied := replaySetup(t)
	// nobody: a new copy is replayed by respawning sleeps at once.
	watch := `last=; while :; do m=$(cat ` + copied + ` 2>/dev/null)
if [ -n "$m" ] && [ "$m" != "$last" ]; then last=$m; ` + respawn + ` 120 4 "$m" & fi
sleep 0.02; done`
	testsupport.StartAsNobody(t, "sh", "-c", watch)

	args := localArgs(dir, newKey("checkreplay"), "--contain", "group")
	// One check, before the campaign; the next would be an hour later.
	check := copyMarkerAsNobody(copied) + "; sleep 1"
	first := start(t, "root's run with a health check", nil,
		withCommand(append(slices.Clip(args), "--health-cmd", check, "--health-interval", "1h"), "exit 0")...)
	if code := first.Wait(60 * time.Second); code != 0 {
		t.Fatalf("root's run with a health check: exit %d\n%s", code, first.Output())
	}
	copiedMarker(t, copied)
	if !strings.Contains(first.Output(), "processes of a health check still alive") {
		t.Fatalf("the check was seen gone: nobody's replay came too late to test anything\n%s", first.Output())
	}

	rootJobRuns(t, dir, args, "nobody's sleeps respawned with each health check's sealed marker as it ran")
}
