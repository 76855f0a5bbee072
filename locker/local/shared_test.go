//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// On a host shared with other users, leaderrun runs as root (systemd,
// cron) and the other users try to redirect its writes, block its lock or
// wedge its epoch (DESIGN §1.15). The tests run as root and act as
// another user through setpriv.

const nobody = 65534

// asNobody runs argv as uid and gid 65534 with no supplementary groups and
// returns its exit status (-1: it could not be started).
func asNobody(t *testing.T, argv ...string) int {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Logf("as nobody: %v: %v: %s", argv, err, out)
			return ee.ExitCode()
		}
		t.Fatalf("as nobody: %v: %v", argv, err)
	}
	return 0
}

// needRoot skips a test that needs root and setpriv.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	for _, tool := range []string{"setpriv", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux)", tool)
		}
	}
}

// reachable is a fresh directory that every user can reach but only root
// can write: the test's temporary directory and its parent opened to
// traversal.
func reachable(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// privateHost points the host directory at a fresh directory for the test.
func privateHost(t *testing.T) string {
	t.Helper()
	host := t.TempDir()
	saved := hostDir
	hostDir = func(int) string { return host }
	t.Cleanup(func() { hostDir = saved })
	return host
}

// A lock or state directory that another user can write in is refused,
// whatever that user put there, and nothing is written through the
// symlinks they planted: not the lock file, not the counter's temporary
// file, not the run or term records. A sticky one (like /tmp) is taken
// when the entries leaderrun uses are its own.
func TestOtherUsersSymlinksAreNeverFollowed(t *testing.T) {
	needRoot(t)
	privateHost(t)
	base := reachable(t)
	secret := testsupport.WriteFile(t, filepath.Join(base, "secret"), "root's secret\n", 0o600)
	other := testsupport.WriteFile(t, filepath.Join(base, "other"), "another file\n", 0o644)
	victims := filepath.Join(base, "victims")
	if err := os.Mkdir(victims, 0o755); err != nil {
		t.Fatal(err)
	}
	targets := []string{secret, other, victims}

	opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
	for _, tc := range []struct {
		name  string
		mode  os.FileMode // the shared directory's
		owner int         // its owner
		state bool        // the shared directory is the --state-dir, not the --lock-dir
	}{
		{"lock dir of nobody", 0o755, nobody, false},
		{"world-writable lock dir", 0o777, 0, false},
		{"sticky lock dir with entries of nobody", 0o777 | os.ModeSticky, 0, false},
		{"world-writable state dir", 0o777, 0, true},
		{"sticky state dir with entries of nobody", 0o777 | os.ModeSticky, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := filepath.Join(base, strings.NewReplacer(" ", "-", ",", "").Replace(tc.name))
			if err := os.Mkdir(shared, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(shared, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			// What the other user plants.
			in := filepath.Join(shared, "leaderrun")
			script := "mkdir -p " + in +
				" && ln -s " + secret + " " + in + "/job.lock" +
				" && ln -s " + other + " " + in + "/job.epoch.tmp" +
				" && ln -s " + other + " " + in + "/job~control.lock" +
				" && ln -s " + victims + " " + in + "/job~run" +
				" && ln -s " + victims + " " + in + "/job~history"
			if code := asNobody(t, "sh", "-c", script); code != 0 {
				t.Fatalf("planting the symlinks failed: exit %d", code)
			}
			before := snapshot(t, targets...)

			cfg := Config{Options: opts, Dir: shared}
			if tc.state {
				cfg.Dir, cfg.StateDir = filepath.Join(t.TempDir(), "locks"), shared
			}
			l, err := New(cfg)
			if err == nil {
				lease, aerr := l.Acquire(context.Background())
				err = aerr
				if aerr == nil {
					_ = l.RecordRun(context.Background(), lease, locker.Run{Slot: "s", Outcome: locker.RunStarted, ID: "root", At: time.Now(), Expires: time.Now().Add(time.Hour)})
					_ = l.RecordTerm(context.Background(), locker.Term{Epoch: lease.Epoch(), ID: "root", Start: time.Now()}, 10)
					_, _ = l.SetControl(context.Background(), locker.Control{})
					_ = lease.Release(context.Background())
				}
			}
			if after := snapshot(t, targets...); !slices.Equal(before, after) {
				t.Fatalf("root wrote through nobody's symlinks:\nbefore %q\nafter  %q", before, after)
			}
			var ce *locker.ConfigError
			want := "Dir"
			if tc.state {
				want = "StateDir"
			}
			if !errors.As(err, &ce) || ce.Field != want || !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("New/Acquire = %v, want a ConfigError for %s", err, want)
			}
			t.Logf("refused: %v", err)
		})
	}

	// A sticky directory whose entries are root's own is fine.
	t.Run("sticky lock dir, our entries", func(t *testing.T) {
		shared := filepath.Join(base, "sticky-ours")
		if err := os.Mkdir(shared, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		l, err := New(Config{Options: opts, Dir: shared})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(context.Background())
	})
}

// snapshot is the content of each file and the names in each directory.
func snapshot(t *testing.T, paths ...string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		if entries, err := os.ReadDir(p); err == nil {
			for _, e := range entries {
				out = append(out, p+"/"+e.Name())
			}
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p+": "+string(b))
	}
	return out
}

// No other user can open leaderrun's lock, control lock or counter lock,
// nor the directories they are in, so none can hold an flock on any of
// them: not to keep root's candidates waiting for ever, nor its pause from
// being written, nor to wedge a new holder in its epoch step. Files and
// directories an earlier version made with wider modes are narrowed when
// used.
func TestOtherUsersCannotLockOurFiles(t *testing.T) {
	needRoot(t)
	host := privateHost(t)
	for _, tc := range []struct {
		name   string
		legacy bool
	}{{"fresh", false}, {"left wider by an earlier version", true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := reachable(t)
			locks, state := filepath.Join(base, "locks"), filepath.Join(base, "state")
			opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
			cfg := Config{Options: opts, Dir: locks, StateDir: state}
			if tc.legacy {
				// What an earlier version left: 0755 directories, 0644 files.
				for _, d := range []string{locks, state} {
					if err := os.MkdirAll(filepath.Join(d, "leaderrun"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				for _, f := range []string{locks + "/leaderrun/job.lock", locks + "/leaderrun/job~control.lock", state + "/leaderrun/job.epoch"} {
					testsupport.WriteFile(t, f, "", 0o644)
				}
				testsupport.WriteFile(t, state+"/leaderrun/job.epoch", "3\n", 0o644)
			}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.SetControl(context.Background(), locker.Control{}); err != nil {
				t.Fatal(err)
			}
			_ = lease.Release(context.Background())

			targets := []string{
				locks + "/leaderrun/job.lock", locks + "/leaderrun/job~control.lock",
				locks + "/leaderrun", state + "/leaderrun", state + "/leaderrun/" + epochLock,
				locks + "/leaderrun/" + epochLock,
			}
			for _, p := range targets {
				if code := asNobody(t, "flock", "-n", "-s", p, "true"); code == 0 {
					t.Errorf("nobody took an flock on %s", p)
				}
			}
			// The files are 0600 and the directories 0700.
			for _, p := range append(targets, filepath.Join(host, "by-path")) {
				fi, err := os.Stat(p)
				if err != nil {
					if strings.HasSuffix(p, epochLock) && tc.legacy {
						continue
					}
					t.Fatal(err)
				}
				if want := os.FileMode(0o600); fi.IsDir() && fi.Mode().Perm() != 0o700 || !fi.IsDir() && fi.Mode().Perm() != want {
					t.Errorf("%s has mode %v", p, fi.Mode().Perm())
				}
			}
		})
	}
}

// A reader that is not root cannot wedge root's new holder: even holding
// a shared flock on everything it can open in the lock and state
// directories (here: the directories that hold the counters, opened
// before the holder's first run made them private), the next Acquire
// completes.
func TestOtherUsersFlockOfTheStateDirWedgesNothing(t *testing.T) {
	needRoot(t)
	privateHost(t)
	base := reachable(t)
	locks, state := filepath.Join(base, "locks"), filepath.Join(base, "state")
	opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
	// The directories as an earlier version made them: readable by all.
	for _, d := range []string{locks, state} {
		if err := os.MkdirAll(filepath.Join(d, "leaderrun"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var holders []*exec.Cmd
	for _, d := range []string{locks, state, locks + "/leaderrun", state + "/leaderrun"} {
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "flock", "-s", d, "sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, cmd)
	}
	t.Cleanup(func() {
		for _, c := range holders {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // flock's sleep too
			_ = c.Wait()
		}
	})
	testsupport.WaitFor(t, 10*time.Second, "nobody's flocks", func() bool {
		b, _ := os.ReadFile(procLocks)
		return strings.Count(string(b), "FLOCK  ADVISORY  READ") >= len(holders)
	})
	l, err := New(Config{Options: opts, Dir: locks, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire while nobody holds flocks on the directories: %v", err)
	}
	_ = lease.Release(context.Background())
}

// stallEpoch holds, from this process, the flocks a new holder takes to
// write the counter in dir (the directory's own, which earlier versions
// took, and epochLock's), so that a holder stays between taking the lock
// and writing its record until the returned func is called.
func stallEpoch(t *testing.T, dir string) (release func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, p := range []string{dir, filepath.Join(dir, epochLock)} {
		flags := unix.O_RDONLY
		if p != dir {
			flags = unix.O_RDWR | unix.O_CREAT
		}
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	return func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
}

// While a new holder has the lock but has not yet written its record (its
// counters' fsync: milliseconds, or seconds on a slow disk), the record
// in the lock file is the last term's. Leader must not report it: `check
// --epoch N` would say yes after term N ended, and a candidate of another
// --holders would be refused for a holder that is gone.
func TestLeaderNeverReportsTheLastTermWhileTheNextIsTaken(t *testing.T) {
	privateHost(t)
	locks := t.TempDir()
	gone := locker.Options{Key: "job", Prefix: "leaderrun", ID: "n4_3", TTL: 15 * time.Second, Holders: 4}
	next := locker.Options{Key: "job", Prefix: "leaderrun", ID: "n2_0", TTL: 15 * time.Second, Holders: 2}
	newL := func(o locker.Options) *Locker {
		l, err := New(Config{Options: o, Dir: locks})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first, err := newL(gone).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ended := first.Epoch()
	_ = first.Release(context.Background())

	release := stallEpoch(t, filepath.Join(locks, "leaderrun"))
	type result struct {
		lease locker.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		lease, err := newL(next).Acquire(context.Background())
		done <- result{lease, err}
	}()
	lf, err := os.Open(filepath.Join(locks, "leaderrun", "job.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	// Taken, and its pending record written: this test's two holders are
	// one process, so before that the last term's record names the
	// lock's process too, which no two real leaderruns can.
	testsupport.WaitFor(t, 20*time.Second, "the next holder to take the lock", func() bool {
		pids, err := flockPIDs(lf, 0)
		b, rerr := os.ReadFile(lf.Name())
		return err == nil && len(pids) > 0 && rerr == nil && !strings.Contains(string(b), "n4_3")
	})
	for range 3 {
		h, err := newL(gone).Leader(context.Background())
		if err == nil && (h.Epoch == ended || h.ID == "n4_3" || h.Holders == 4) {
			release()
			t.Fatalf("while the next holder is taking the lock, Leader = %+v: the term of epoch %d, which ended", h, ended)
		}
		t.Logf("Leader while taken: %+v, %v", h, err)
	}
	release()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lease.Release(context.Background())
	h, err := newL(gone).Leader(context.Background())
	if err != nil || h.Epoch != r.lease.Epoch() || h.ID != "n2_0" || r.lease.Epoch() <= ended {
		t.Fatalf("Leader once the record is written = %+v, %v; want n2_0 at epoch %d > %d", h, err, r.lease.Epoch(), ended)
	}
}

// A lock taken by something that is not a leaderrun of this key (here
// flock(1) on the lock file) is named as such by Leader and by a --no-wait
// Acquire: the pid that holds it, not the record of a term that ended.
func TestLockHeldByAnotherProgramIsNamed(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock (util-linux)")
	}
	privateHost(t)
	locks := t.TempDir()
	l := newLocker(t, locks, true)
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
	path := filepath.Join(locks, "leaderrun", "job.lock")
	cmd := exec.Command("flock", path, "sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	testsupport.WaitFor(t, 10*time.Second, "flock to take the lock", func() bool {
		b, _ := os.ReadFile(procLocks)
		return strings.Contains(string(b), " WRITE "+strconv.Itoa(cmd.Process.Pid)+" ")
	})
	want := "pid " + strconv.Itoa(cmd.Process.Pid) + " (flock), not a leaderrun"
	h, err := l.Leader(context.Background())
	if err != nil || h.ID != want || h.Epoch != 0 {
		t.Fatalf("Leader = %+v, %v; want %q", h, err, want)
	}
	if _, err := newLocker(t, locks, true).Acquire(context.Background()); !errors.Is(err, locker.ErrHeld) || !strings.Contains(err.Error(), want) {
		t.Fatalf("--no-wait Acquire = %v; want ErrHeld naming %q", err, want)
	}
}

// The epoch of a key never repeats when its on-disk lock directory is
// deleted by hand, whatever --state-dir each run used: the host directory
// keeps a copy named after the lock file's path.
func TestEpochOutlivesADeletedOnDiskLockDir(t *testing.T) {
	host := privateHost(t)
	locks := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	if volatile(locks) {
		t.Skip("the test's temporary directory is on tmpfs")
	}
	s1, s2 := t.TempDir(), t.TempDir()
	step := epochSteps(t, locks)
	step(s1)
	step(s1)
	step(s2)
	if err := os.RemoveAll(locks); err != nil {
		t.Fatal(err)
	}
	step(s1)
	if _, err := os.Stat(filepath.Join(host, "by-path", locks, "leaderrun", "job.epoch")); err != nil {
		t.Fatalf("no copy in the host directory: %v", err)
	}
	// And the host copy deleted too, with the lock directory there again:
	// the lock directory's copy keeps it.
	if err := os.RemoveAll(filepath.Join(host, "by-path")); err != nil {
		t.Fatal(err)
	}
	step(s2)
}

// New makes nothing, so a run refused later in its start-up (a bad
// --http-addr, a containment it cannot have) leaves no directory behind;
// the directories are made by the first write.
func TestNewMakesNothing(t *testing.T) {
	privateHost(t)
	base := t.TempDir()
	before := tree(t, base)
	l, err := New(Config{Options: locker.Options{Key: "a/job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: filepath.Join(base, "new", "locks"), StateDir: filepath.Join(base, "state")})
	if err != nil {
		t.Fatal(err)
	}
	if after := tree(t, base); !slices.Equal(before, after) {
		t.Fatalf("New made %v", slices.DeleteFunc(after, func(p string) bool { return slices.Contains(before, p) }))
	}
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
	if _, err := os.Stat(filepath.Join(base, "new", "locks", "leaderrun", "a", "job.lock")); err != nil {
		t.Fatal(err)
	}
}

// The lock file is one more place the count is kept: with every counter
// file deleted, the record the last holder left there (or the pending
// record of a holder that died before its own) still keeps the next
// epoch above it.
func TestLockFileRecordsKeepTheCount(t *testing.T) {
	host := privateHost(t)
	locks := t.TempDir()
	step := epochSteps(t, locks)
	step("")
	step("")
	wipe := func() {
		t.Helper()
		for _, p := range []string{filepath.Join(locks, "leaderrun", "job.epoch"), filepath.Join(host, "by-path")} {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	wipe()
	step("") // 3, from the record
	// A holder that died between its pending record and its own: the
	// pending record carries the epoch it replaced.
	testsupport.WriteFile(t, filepath.Join(locks, "leaderrun", "job.lock"), `{"id":"gone","pid":1,"epoch":0,"after":41}`, 0o600)
	wipe()
	l := newLocker(t, locks, true)
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if lease.Epoch() != 42 {
		t.Fatalf("epoch %d after a pending record over epoch 41, want 42", lease.Epoch())
	}
}
