package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Nobody is the uid and gid the tests act as another user of the host with.
const Nobody = 65534

// StartAsNobody starts argv as uid and gid Nobody with no supplementary
// groups (setpriv, util-linux), in a process group of its own that the
// test's cleanup kills: a process of another user that holds descriptors
// and locks of its own. It skips the test unless run as root with setpriv.
func StartAsNobody(t testing.TB, argv ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	return StartInGroup(t, exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)...))
}

// StartInGroup starts cmd in a process group of its own, killed whole
// (SIGKILL) and waited for when the test ends.
func StartInGroup(t testing.TB, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// SharedDir is a fresh directory that every user can write in (0777),
// its parent reachable by all: where a process of another user leaves its
// marks for the test.
func SharedDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(d), 0o755}, {d, 0o777}} {
		if err := os.Chmod(p.path, p.mode); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
