package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Attacks by another local user, with no privilege, on root's leaderrun
// on the local backend (SAFETY.md, "Other local users").

// asNobody makes cmd run as nobody with an empty environment.
func asNobody(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run an attacker as nobody")
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testsupport.Nobody, Gid: testsupport.Nobody}}
	return cmd
}

// startAsNobody runs prog, built by testsupport, with args as nobody, in a
// process group of its own that is killed at the end of the test.
func startAsNobody(t *testing.T, name, prog string, args ...string) *Proc {
	t.Helper()
	// buildC leaves the program in a directory only root may enter.
	if err := os.Chmod(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	p := launch(t, name, asNobody(t, exec.Command(prog, args...)))
	t.Cleanup(func() { _ = syscall.Kill(-p.Pid(), syscall.SIGKILL) })
	return p
}

// forgedMarker runs root's job once under args, reads its cgroup as
// nobody, as any user can, and returns a marker value naming the same key
// and a leaderrun that does not exist: what any user can put in the
// environment of a process of their own.
func forgedMarker(t *testing.T, dir string, args []string) string {
	t.Helper()
	pidFile := filepath.Join(dir, "job.pid")
	first := start(t, "root's first run", nil, withCommand(args, "echo $$ > "+pidFile+"; exec sleep 1000")...)
	pid := readPID(t, pidFile)
	out, err := asNobody(t, exec.Command("cat", "/proc/"+strconvItoa(int64(pid))+"/cgroup")).Output()
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
		t.Skipf("root's job has no job cgroup to read its marker from (group mode?): %q", out)
	}
	// The PID namespace and the key's hash kept, a leaderrun pid that
	// does not exist.
	return contain.EnvMarker + "=4194000.1.1.1." + f[4] + "." + f[5]
}

// TestLocalOtherUserForgedMarkerIsNotKilled: the key's part of a job
// marker is no secret (the job's cgroup is named after the marker, and
// /proc/PID/cgroup is readable by every user), so nobody, after reading it
// once from a job of root's, starts a process of its own with a marker
// naming the key and a dead leaderrun. Root's next leaderrun of the key
// must neither kill it nor take it for a leftover (DESIGN §1.9: the sweep
// by marker counts only processes of leaderrun's own user).
func TestLocalOtherUserForgedMarkerIsNotKilled(t *testing.T) {
	dir := t.TempDir()
	args := localArgs(dir, newKey("forged"))
	forged := forgedMarker(t, dir, args)

	other := asNobody(t, exec.Command("/bin/sleep", "1000"))
	other.Env = []string{forged}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	// Reaped by the test only at its end: killed, it stays a zombie.
	p := start(t, "root's leaderrun", nil, withCommand(args, "true")...)
	code := p.Wait(60 * time.Second)
	if st, err := os.ReadFile("/proc/" + strconvItoa(int64(other.Process.Pid)) + "/stat"); err != nil || !alive(other.Process.Pid) {
		t.Fatalf("nobody's sleep with a forged marker was killed by root's leaderrun (exit %d, stat %q)\n%s", code, st, p.Output())
	}
	if code != 0 || strings.Contains(p.Output(), "leftover") {
		t.Fatalf("root's leaderrun beside nobody's sleep with a forged marker: exit %d, want 0 and no word of a leftover\n%s", code, p.Output())
	}
}

// TestLocalOtherUserForgedMarkerBlocksJob: with the forged marker of
// TestLocalOtherUserForgedMarkerIsNotKilled nobody keeps a few sleeps
// running, starting another as soon as one is killed. Taken for
// leftovers, they kept every sweep from finishing ("processes of leftover
// jobs still alive"), and root's leaderrun started nothing and exited 125,
// term after term (most runs: a race between root's scans and the
// respawns); root's job must run.
func TestLocalOtherUserForgedMarkerBlocksJob(t *testing.T) {
	respawn, err := testsupport.Respawn()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	args := localArgs(dir, newKey("forged"))
	forged := forgedMarker(t, dir, args)

	startAsNobody(t, "forged leftovers as nobody", respawn, "120", "16", forged)
	time.Sleep(500 * time.Millisecond)

	ran := filepath.Join(dir, "ran")
	p := start(t, "root's leaderrun", nil, withCommand(args, "echo yes > "+ran)...)
	code := p.Wait(90 * time.Second)
	b, _ := os.ReadFile(ran)
	if code != 0 || strings.TrimSpace(string(b)) != "yes" {
		t.Fatalf("root's leaderrun beside nobody's respawned sleeps with a forged marker: exit %d, job ran: %v; want 0 and the job run\n%s",
			code, len(b) > 0, p.Output())
	}
}
