package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// The local backend's lock path and epoch must not depend on the
// environment, on a wiped lock directory or on a reboot (DESIGN §1.13).

// otherUser is an unused uid to run leaderrun as, with a home it owns and a
// copy of the binary it may execute. Root only: tests that need it say so.
type otherUser struct {
	uid    int
	home   string
	binary string
}

func newOtherUser(t *testing.T) otherUser {
	t.Helper()
	uid := 40000 + os.Getpid()%20000
	u := newUser(t, uid)
	t.Cleanup(func() {
		_ = os.RemoveAll("/tmp/leaderrun-" + strconv.Itoa(uid))
		_ = os.RemoveAll("/var/tmp/leaderrun-" + strconv.Itoa(uid))
	})
	return u
}

// newUser is otherUser for a given uid (whose group id is the same
// number). It leaves the uid's lock and host directories alone.
func newUser(t *testing.T, uid int) otherUser {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run leaderrun as another user")
	}
	dir, err := os.MkdirTemp("/tmp", "leaderrun-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	u := otherUser{uid: uid, home: filepath.Join(dir, "home"), binary: filepath.Join(dir, "leaderrun")}
	if err := os.Mkdir(u.home, 0o700); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(u.binary, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	_ = dst.Close()
	for _, p := range []string{dir, u.home} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// start runs leaderrun as this user with a clean environment plus env.
func (u otherUser) start(t *testing.T, name string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(u.binary, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + u.home}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.uid)}}
	return launch(t, name, cmd)
}

func TestLocalLockPathIgnoresXDGRuntimeDir(t *testing.T) {
	u := newOtherUser(t)
	key := newKey("xdg")
	xdg := filepath.Join(u.home, "runtime")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(xdg, u.uid, u.uid)
	pidFile := filepath.Join(u.home, "holder.pid")
	u.start(t, "login shell", []string{"XDG_RUNTIME_DIR=" + xdg},
		"--backend", "local", "--key", key, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 1000")
	readPID(t, pidFile)
	cron := u.start(t, "cron", nil, "--backend", "local", "--key", key, "--no-wait", "--", "true")
	if code := cron.Wait(10 * time.Second); code != 124 {
		t.Fatalf("same user and key without XDG_RUNTIME_DIR: exit %d, want 124 (held)\n%s", code, cron.Output())
	}
}

func TestLocalSquattedLockDirIsRefused(t *testing.T) {
	u := newOtherUser(t)
	// Another user (root here) made the fixed per-user path first.
	squat := "/tmp/leaderrun-" + strconv.Itoa(u.uid)
	if err := os.Mkdir(squat, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(squat, 0o777)
	p := u.start(t, "victim", nil, "--backend", "local", "--key", "k", "--", "true")
	code := p.Wait(10 * time.Second)
	out := strings.TrimSpace(p.Output())
	if code != 125 || strings.Count(out, "\n") != 0 || !strings.Contains(out, "--lock-dir") {
		t.Fatalf("squatted %s: exit %d, want 125 and one line naming --lock-dir:\n%s", squat, code, out)
	}
	if entries, _ := os.ReadDir(squat); len(entries) != 0 {
		t.Fatalf("leaderrun wrote into the squatted directory: %v", entries)
	}
	// The same for the user's host directory, where its epoch lasts: a
	// squatter there could rewind it.
	if err := os.Remove(squat); err != nil {
		t.Fatal(err)
	}
	host := "/var/tmp/leaderrun-" + strconv.Itoa(u.uid)
	if err := os.Mkdir(host, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(host, 0o777)
	p = u.start(t, "victim of the host directory", nil, "--backend", "local", "--key", "k", "--", "true")
	code = p.Wait(10 * time.Second)
	out = strings.TrimSpace(p.Output())
	if code != 125 || strings.Count(out, "\n") != 0 || !strings.Contains(out, "--state-dir") || !strings.Contains(out, host) {
		t.Fatalf("squatted %s: exit %d, want 125 and one line naming --state-dir and the directory:\n%s", host, code, out)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("leaderrun wrote into the squatted directory: %v", entries)
	}
}

func TestLocalStatusOnMissingDirIs125AndCreatesNothing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "typo")
	for _, cmd := range [][]string{
		{"status", "--backend", "local", "--lock-dir", missing, "--key", "k"},
		{"check", "--backend", "local", "--lock-dir", missing, "--key", "k", "--epoch", "1"},
	} {
		p := start(t, cmd[0], nil, cmd...)
		if code := p.Wait(10 * time.Second); code != 125 || !strings.Contains(p.Output(), missing) {
			t.Fatalf("%s on a missing lock dir: exit %d, want 125 naming it:\n%s", cmd[0], code, p.Output())
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%s created %s", cmd[0], missing)
		}
	}
}

// epochOf runs one short leadership and returns the LEADER_EPOCH its child
// saw. wrap, when set, is a shell prefix around leaderrun (a private mount
// namespace).
func epochOf(t *testing.T, wrap string, args ...string) uint64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "epoch")
	line := binary
	for _, a := range append(args, "--", "sh", "-c", "echo $LEADER_EPOCH > "+out) {
		line += " '" + a + "'"
	}
	cmd := exec.Command("sh", "-c", wrap+line)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLocalEpochSurvivesWipedLockDirAndReboot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private mount namespace (unshare -m) and /var/lib/leaderrun")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed: apt-get install util-linux")
	}
	// A prefix of its own keeps this test's state in /var/lib/leaderrun
	// apart from anything else there; it is removed afterwards.
	prefix := "e2e-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join("/var/lib/leaderrun", prefix)) })
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--backend", "local", "--lock-dir", run, "--prefix", prefix, "--key", "k", "-q"}
	// Each "boot" mounts a fresh, empty tmpfs as the runtime directory, as
	// /run is after a reboot.
	boot := "unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs tmpfs " + run + " && exec \"$0\" \"$@\"' "
	var last uint64
	for i := range 3 {
		e := epochOf(t, boot, args...)
		if e <= last {
			t.Fatalf("boot %d: epoch %d after %d: the counter started over with the runtime directory", i, e, last)
		}
		last = e
	}
	if entries, _ := os.ReadDir(run); len(entries) != 0 {
		t.Fatalf("the tmpfs mounts leaked into the test's namespace: %v", entries)
	}
	// An on-disk lock directory wiped between runs, state kept elsewhere.
	disk := filepath.Join(t.TempDir(), "locks")
	state := filepath.Join(t.TempDir(), "state")
	dargs := []string{"--backend", "local", "--lock-dir", disk, "--state-dir", state, "--key", "k", "-q"}
	for i := range 3 {
		e := epochOf(t, "", dargs...)
		if e <= last && i > 0 {
			t.Fatalf("after the lock dir was removed: epoch %d after %d", e, last)
		}
		last = e
		if err := os.RemoveAll(disk); err != nil {
			t.Fatal(err)
		}
	}
}

// epochAs runs one short leadership as u, with env on top of its own, and
// returns the LEADER_EPOCH its child saw.
func (u otherUser) epochAs(t *testing.T, env []string, args ...string) uint64 {
	t.Helper()
	out := filepath.Join(u.home, "epoch")
	_ = os.Remove(out)
	p := u.start(t, strings.Join(env, " "), env, append(args, "--", "sh", "-c", "echo $LEADER_EPOCH > "+out)...)
	if code := p.Wait(20 * time.Second); code != 0 {
		t.Fatalf("as uid %d with %q: exit %d\n%s", u.uid, env, code, p.Output())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An ordinary user's epoch must not depend on HOME, XDG_STATE_HOME or
// --state-dir: the same key run from cron and from a login shell, with the
// copy beside the lock gone after a reboot, must still count up.
func TestLocalEpochIgnoresHomeAndStateDirAcrossReboots(t *testing.T) {
	u := newOtherUser(t)
	mine := func(name string) string {
		p := filepath.Join(u.home, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, u.uid, u.uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	otherHome, xdg, state := mine("other-home"), mine("xdg-state"), mine("state")
	locks := "/tmp/leaderrun-" + strconv.Itoa(u.uid)
	reboot := func() {
		t.Helper()
		if err := os.RemoveAll(locks); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--backend", "local", "--key", "k", "-q"}
	steps := []struct {
		name   string
		env    []string
		extra  []string
		reboot bool
	}{
		{"login shell", nil, nil, false},
		{"XDG_STATE_HOME set", []string{"XDG_STATE_HOME=" + xdg}, nil, false},
		{"another HOME after a reboot", []string{"HOME=" + otherHome}, nil, true},
		{"--state-dir", nil, []string{"--state-dir", state}, false},
		{"the login shell again after a reboot", nil, nil, true},
		{"XDG_STATE_HOME again after a reboot", []string{"XDG_STATE_HOME=" + xdg}, nil, true},
		{"no home at all", []string{"HOME=/nonexistent"}, nil, false},
	}
	var last uint64
	var seen []uint64
	for _, s := range steps {
		if s.reboot {
			reboot()
		}
		e := u.epochAs(t, s.env, append(append([]string(nil), args...), s.extra...)...)
		seen = append(seen, e)
		if e <= last {
			t.Fatalf("%s: epoch %d after %d (epochs so far %v)", s.name, e, last, seen)
		}
		last = e
	}
	t.Logf("epochs %v", seen)
}

// A system user whose home does not exist (nobody, www-data) runs the local
// backend, and its epoch still counts up.
func TestLocalRunsForUserWithoutHome(t *testing.T) {
	u := newUser(t, 65534)
	// A prefix of its own: the user's directories may be shared with
	// anything else run as nobody; only this test's keys are removed.
	prefix := "e2e-" + strconv.Itoa(os.Getpid())
	for _, d := range []string{"/tmp/leaderrun-65534", "/var/tmp/leaderrun-65534"} {
		_, err := os.Stat(d)
		ours := os.IsNotExist(err)
		t.Cleanup(func() {
			if ours {
				_ = os.RemoveAll(d)
			} else {
				_ = os.RemoveAll(filepath.Join(d, prefix))
			}
		})
	}
	env := []string{"HOME=/nonexistent"}
	args := []string{"--backend", "local", "--prefix", prefix, "--key", "k", "-q"}
	first := u.epochAs(t, env, args...)
	if err := os.RemoveAll(filepath.Join("/tmp/leaderrun-65534", prefix)); err != nil {
		t.Fatal(err)
	}
	if second := u.epochAs(t, env, args...); second <= first {
		t.Fatalf("epoch %d after %d once the lock directory was emptied", second, first)
	}
}

// The once-per records of an ordinary user live in the host directory too,
// so a slot run from one environment is seen from any other; a record an
// earlier version left in ~/.local/state still counts.
func TestLocalOncePerRecordsIgnoreHome(t *testing.T) {
	u := newOtherUser(t)
	old := filepath.Join(u.home, ".local", "state", "leaderrun", "leaderrun", "k~run")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := locker.Run{Slot: "before", Outcome: locker.RunSucceeded, ID: "old", Hostname: "h", PID: 1, Epoch: 1, At: now, Expires: now.Add(time.Hour)}
	if err := os.WriteFile(filepath.Join(old, "before"), rec.Record(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chown", "-R", strconv.Itoa(u.uid)+":"+strconv.Itoa(u.uid), filepath.Join(u.home, ".local")).Run(); err != nil {
		t.Fatal(err)
	}
	otherHome := filepath.Join(u.home, "other")
	if err := os.Mkdir(otherHome, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(otherHome, u.uid, u.uid)
	ran := filepath.Join(u.home, "ran")
	run := func(name string, env []string, slot string) bool {
		t.Helper()
		_ = os.Remove(ran)
		p := u.start(t, name, env, "--backend", "local", "--key", "k", "--run-id", slot, "-q", "--", "sh", "-c", "echo "+slot+" > "+ran)
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, code, p.Output())
		}
		_, err := os.Stat(ran)
		return err == nil
	}
	if run("slot an earlier version recorded", nil, "before") {
		t.Fatal("a slot recorded in the earlier per-user state directory ran again")
	}
	if !run("new slot from the login shell", nil, "now") {
		t.Fatal("a new slot did not run")
	}
	if run("same slot from cron with another HOME", []string{"HOME=" + otherHome}, "now") {
		t.Fatal("a slot run from one HOME ran again from another")
	}
}
