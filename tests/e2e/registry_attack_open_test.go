//go:build leaderrun_attack

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

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Left open (run with -tags leaderrun_attack): one registry entry of a
// live job removed (an operator cleaning the entries the docs say stay
// behind, or a cleaner of old files under /tmp/leaderrun-UID, where a
// user's registry lives, aging the entry of a job that has run for
// days), then its leaderrun and guard killed together. The standby's
// re-check finds neither the entry nor a changed directory, and its child
// starts beside the leftover.
func TestLeftoverSweptAfterItsRegistryEntryWasRemoved(t *testing.T) {
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		if err := os.Remove(entry); err != nil {
			t.Fatal(err)
		}
	})
}

// Left open (run with -tags leaderrun_attack): a leaderrun of this
// version that has no marker key registers nothing. Here another user
// makes /tmp/leaderrun-UID first, so that leader A of user UID runs
// without one (unsealed markers, no registry), then removes it again
// (their own directory in sticky /tmp) before standby B of the same user
// and key starts: B has a registry, and A, who had no job when B swept
// (between two runs of its child), is not watched. A's next job
// daemonizes; A and its guard are killed together; B's re-check finds
// nothing and its child starts beside the daemon. The registry's premise
// that every leaderrun of this version registers its jobs does not hold
// for one that started without a marker key.
func TestLeftoverOfALeaderrunWithoutMarkerKeySwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to run leaderrun as another user")
	}
	const uid = 47111
	bin, dir := asUser(t, uid, "")
	keyDir := "/tmp/leaderrun-" + strconv.Itoa(uid)
	_ = os.RemoveAll(keyDir)
	t.Cleanup(func() { _ = os.RemoveAll(keyDir) })
	// Another user's directory, made first.
	if err := os.Mkdir(keyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(keyDir, testsupport.Nobody, testsupport.Nobody); err != nil {
		t.Fatal(err)
	}
	as := func(name, script string) *Proc {
		args := append(localArgs(dir, "k"), "--contain", "group", "--log-level", "debug")
		if name == "A" {
			args = append(args, "--restart", "always", "--restart-delay", "3s")
		}
		cmd := exec.Command(bin, withCommand(args, script)...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return launch(t, name, cmd)
	}
	later := `if [ ! -e ` + dir + `/go ]; then exit 0; fi
` + daemonizingJob(dir, "env -u LEADER_KEY ")
	a := as("A", later)
	waitFor(t, 15*time.Second, "A's first child to exit", func() bool { return strings.Contains(a.Output(), "child exited") })
	if !strings.Contains(a.Output(), "not sealed") {
		t.Fatalf("A has a marker key:\n%s", a.Output())
	}
	// The other user removes their directory: B makes its own.
	if err := os.RemoveAll(keyDir); err != nil {
		t.Fatal(err)
	}
	b := as("B", checkingJob(dir))
	waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	if strings.Contains(b.Output(), "not sealed") {
		t.Fatalf("B has no marker key:\n%s", b.Output())
	}
	testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	killBoth(t, a)
	if !contain.ProcessAlive(daemon) {
		t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
	}
	nextLeaderSwept(t, b, dir, daemon, "daemon")
}
