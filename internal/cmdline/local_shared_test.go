//go:build linux

package cmdline

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// A run refused at start-up for a bad --http-addr (which is found only
// once the backend was built) leaves no lock or state directory behind.
func TestBadHTTPAddrLeavesNoLockDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	locks, state := filepath.Join(base, "new", "locks"), filepath.Join(base, "new", "state")
	code, _, errOut := leaderrun(t, nil, "--backend", "local", "--lock-dir", locks, "--state-dir", state, "--key", "k",
		"--http-addr", "not-an-address", "--", "true")
	if code != exitcode.Internal || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--http-addr") {
		t.Fatalf("exit %d, want 125 and one line naming --http-addr:\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Fatalf("the refused run left %s behind (%v)", filepath.Join(base, "new"), err)
	}
}

// A lock held by something that is not a leaderrun of the key (flock(1),
// shared or exclusive) is named by status and on the exit line, and the
// candidate exits 124 (a holder was seen, restarted by the packaged unit),
// not 125 "no holder was seen".
func TestLockHeldByAnotherProgram(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock (util-linux)")
	}
	for _, mode := range []string{"-s", "-x"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			local := []string{"--backend", "local", "--lock-dir", dir}
			run := append(append([]string{}, local...), "--key", "k", "--", "true")
			if code, _, errOut := leaderrun(t, nil, run...); code != 0 {
				t.Fatalf("first run: exit %d\n%s", code, errOut)
			}
			cmd := exec.Command("flock", mode, filepath.Join(dir, "leaderrun", "k.lock"), "sleep", "600")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The whole group: flock's sleep holds the lock too.
			defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
			pid := strconv.Itoa(cmd.Process.Pid)
			testsupport.WaitFor(t, 10*time.Second, "flock to take the lock", func() bool {
				b, _ := os.ReadFile("/proc/locks")
				return strings.Contains(string(b), " "+pid+" ")
			})
			want := "pid " + pid + " (flock), not a leaderrun"
			code, out, errOut := leaderrun(t, nil, append([]string{"status", "k"}, local...)...)
			if !strings.Contains(out+errOut, want) {
				t.Errorf("status: exit %d, want it to name %q:\n%s%s", code, want, out, errOut)
			}
			timed := append(append([]string{}, local...), "--key", "k", "--acquire-timeout", "1s", "--", "true")
			code, _, errOut = leaderrun(t, nil, timed...)
			if code != exitcode.NotHeld || !strings.Contains(errOut, want) {
				t.Errorf("--acquire-timeout: exit %d, want 124 naming %q:\n%s", code, want, errOut)
			}
			once := append(append([]string{}, local...), "--key", "k", "--no-wait", "--", "true")
			code, _, errOut = leaderrun(t, nil, once...)
			if code != exitcode.NotHeld || !strings.Contains(errOut, want) {
				t.Errorf("--no-wait: exit %d, want 124 naming %q:\n%s", code, want, errOut)
			}
		})
	}
}

// Root's run with a --lock-dir that another user can write in, where that
// user planted symlinks to root's files as the lock file and the counter's
// temporary file, is refused with one line naming --lock-dir and 125, and
// overwrites nothing.
func TestLockDirOfAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := testsupport.WriteFile(t, filepath.Join(base, "secret"), "root's\n", 0o600)
	other := testsupport.WriteFile(t, filepath.Join(base, "other"), "other\n", 0o644)
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	plant := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c",
		"mkdir "+shared+"/leaderrun && ln -s "+secret+" "+shared+"/leaderrun/job.lock && ln -s "+other+" "+shared+"/leaderrun/job.epoch.tmp")
	if out, err := plant.CombinedOutput(); err != nil {
		t.Fatalf("planting: %v\n%s", err, out)
	}
	for _, dirFlag := range []string{"--lock-dir", "--state-dir"} {
		args := []string{"--backend", "local", "--lock-dir", shared, "--key", "job", "--no-wait", "--", "true"}
		if dirFlag == "--state-dir" {
			args = []string{"--backend", "local", "--lock-dir", filepath.Join(t.TempDir(), "locks"), "--state-dir", shared, "--key", "job", "--no-wait", "--", "true"}
		}
		code, _, errOut := leaderrun(t, nil, args...)
		if code != exitcode.Internal || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, dirFlag) {
			t.Errorf("%s of another user: exit %d, want 125 and one line naming %s:\n%s", dirFlag, code, dirFlag, errOut)
		}
	}
	for path, want := range map[string]string{secret: "root's\n", other: "other\n"} {
		if b, _ := os.ReadFile(path); string(b) != want {
			t.Errorf("%s was overwritten through a symlink: %q", path, b)
		}
	}
}
