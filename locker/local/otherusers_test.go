//go:build linux

package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// needUserNS skips a test when another user cannot make a user and mount
// namespace of its own here (unshare -Urm).
func needUserNS(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	if err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "unshare", "-Urm", "true").Run(); err != nil {
		t.Skipf("other users cannot make user namespaces here: %v", err)
	}
}

// Another user cannot make a new holder wait by holding, in a mount
// namespace of its own, an flock on a deleted file that it named as our
// lock file is named: it looks like a holder of a lock file removed by
// hand (waitReplacedHolders), but no other user could have had ours open.
func TestOtherUsersDeletedNamesakeWedgesNothing(t *testing.T) {
	needUserNS(t)
	privateHost(t)
	base := reachable(t)
	locks := filepath.Join(base, "locks")
	marks := reachable(t)
	if err := os.Chmod(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(marks, "deleted")
	lockFile := filepath.Join(locks, "leaderrun", "job.lock")
	script := `mount -t tmpfs none "$1" && mkdir -p "$(dirname "$2")" && : >"$2" &&
exec flock -x "$2" sh -c 'rm "$1" && : >"$2" && exec sleep 600' sh "$2" "$3"`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"unshare", "-Urm", "sh", "-c", script, "sh", base, lockFile, mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // flock's sleep too
		_ = cmd.Wait()
	})
	testsupport.WaitFor(t, 20*time.Second, "nobody's flock on its deleted namesake of the lock file", func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})

	l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second}, Dir: locks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire while nobody holds a deleted file named %s in its own namespace: %v", lockFile, err)
	}
	_ = lease.Release(context.Background())
}
