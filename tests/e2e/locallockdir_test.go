package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLocalLockDirThroughSymlinkLeftoverSwept: two runs name one lock
// directory two ways, through a symlink (/var/run is one to /run on most
// hosts: a unit says /run/locks, a crontab /var/run/locks). They take the
// same lock, so the second must sweep what the first left when it and its
// guard were killed. The sweep's key was made of the directory as spelled,
// so the second run looked for another key's leftovers, and its child ran
// beside the first run's job.
func TestLocalLockDirThroughSymlinkLeftoverSwept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real, link := filepath.Join(dir, "locks"), filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	// A daemon of the job: the child itself dies with leaderrun
	// (PDEATHSIG).
	daemon := `(setsid sh -c 'echo $$ >> ` + dir + `/job.pids; exec sleep 1000' >/dev/null 2>&1 </dev/null &)
exec sleep 1000`
	a := start(t, "A", nil, withCommand(localArgs(real, "k", "--contain", "group"), daemon)...)
	job := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(job, syscall.SIGKILL) })
	killBoth(t, a)
	if !alive(job) {
		t.Fatalf("A's job %d died with its supervisors: nothing left to sweep", job)
	}
	b := start(t, "B", nil, withCommand(localArgs(link, "k", "--contain", "group"), checkingJob(dir))...)
	nextLeaderSwept(t, b, dir, job, "job")
}
