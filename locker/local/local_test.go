package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func newLocker(t *testing.T, dir string, noWait bool) *Locker {
	t.Helper()
	l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second, NoWait: noWait}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestEpochPersistsAndIncreases(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for i := range 5 {
		l := newLocker(t, dir, false)
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if lease.Epoch() <= last {
			t.Fatalf("leadership %d: epoch %d after %d", i, lease.Epoch(), last)
		}
		last = lease.Epoch()
		if i == 2 {
			// Removing the lock file between leaderships must not reset it.
			_ = os.Remove(filepath.Join(dir, "leaderrun", "job.lock"))
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaderWhileHeldAndAfterRelease: another candidate reads the holder
// from the lock file, and no leader once it is released (exclusion and
// hand-over are lockertest.LockContract's).
func TestLeaderWhileHeldAndAfterRelease(t *testing.T) {
	dir := t.TempDir()
	first, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h, err := newLocker(t, dir, false).Leader(context.Background())
	if err != nil || h.ID != "me" || h.Epoch != first.Epoch() || h.PID != os.Getpid() {
		t.Fatalf("Leader = %+v, %v", h, err)
	}
	_ = first.Release(context.Background())
	if _, err := newLocker(t, dir, false).Leader(context.Background()); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader after release: %v, want ErrNoLeader", err)
	}
}

func TestReplacedLockFileIsLost(t *testing.T) {
	dir := t.TempDir()
	lease, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if _, err := lease.Renew(context.Background()); err != nil {
		t.Fatalf("Renew while held: %v", err)
	}
	path := filepath.Join(dir, "leaderrun", "job.lock")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Renew(context.Background()); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after the lock file was removed: %v, want ErrLost", err)
	}
	select {
	case <-lease.Lost():
	default:
		t.Fatal("Lost not closed")
	}
}

func TestDefaultDirIgnoresEnvironment(t *testing.T) {
	want := DefaultDir()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	if got := DefaultDir(); got != want {
		t.Fatalf("DefaultDir = %q with XDG_RUNTIME_DIR and TMPDIR set, %q without", got, want)
	}
}

func TestOwnDirRefusesOthersDirectories(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	link := filepath.Join(base, "link")
	_ = os.Symlink(base, link)
	cases := map[string]string{"world-writable": open, "symlink": link}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		_ = os.Mkdir(theirs, 0o700)
		_ = os.Chown(theirs, 12345, 12345)
		cases["owned by another uid"] = theirs
	}
	for name, dir := range cases {
		var ce *locker.ConfigError
		if err := ownDir(dir, "Dir"); !errors.As(err, &ce) || ce.Field != "Dir" || !errors.Is(err, locker.ErrRefused) {
			t.Errorf("%s: ownDir = %v, want a ConfigError for Dir", name, err)
		}
	}
	mine := filepath.Join(base, "mine")
	if err := ownDir(mine, "Dir"); err != nil {
		t.Fatalf("a fresh directory: %v", err)
	}
}

func TestRelativeDirsAreRefused(t *testing.T) {
	for _, cfg := range []Config{{Dir: "locks"}, {Dir: t.TempDir(), StateDir: "state"}} {
		cfg.Options = locker.Options{Key: "job", Prefix: "leaderrun"}
		var ce *locker.ConfigError
		if _, err := New(cfg); !errors.As(err, &ce) {
			t.Errorf("New(%+v) = %v, want a ConfigError", cfg, err)
		}
	}
}

func TestReadOnlyCreatesNothing(t *testing.T) {
	base := t.TempDir()
	missing := filepath.Join(base, "missing")
	opts := locker.Options{Key: "job", Prefix: "leaderrun"}
	if _, err := New(Config{Options: opts, Dir: missing, ReadOnly: true}); !errors.Is(err, locker.ErrRefused) {
		t.Fatalf("read-only on a missing dir: %v, want a refusal", err)
	}
	l, err := New(Config{Options: opts, Dir: base, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Leader(context.Background()); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader of a never-used key: %v, want ErrNoLeader", err)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Fatalf("read-only use created %v", entries)
	}
}

func TestEpochSurvivesWipedLockDirAndMovedState(t *testing.T) {
	locks, stateA, stateB := t.TempDir(), t.TempDir(), t.TempDir()
	step := epochSteps(t, locks)
	step(stateA)
	step(stateA)
	// The lock directory wiped (a reboot empties /run): the state keeps it.
	if err := os.RemoveAll(locks); err != nil {
		t.Fatal(err)
	}
	step(stateA)
	// The state directory moved (another $XDG_STATE_HOME) within one boot:
	// the copy beside the lock file keeps it.
	step(stateB)
}

func TestLeaderSeesHolderWithoutLocking(t *testing.T) {
	dir := t.TempDir()
	lease, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	ro, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun"}, Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ro.Leader(context.Background())
	if err != nil || h.Epoch != lease.Epoch() {
		t.Fatalf("read-only Leader = %+v, %v", h, err)
	}
}

func TestRunLogContract(t *testing.T) {
	dir := t.TempDir()
	lockertest.RunLogContract(t, func(t *testing.T, key string) locker.Locker {
		return newLockerKey(t, dir, key)
	})
}

func newLockerKey(t *testing.T, dir, key string) *Locker {
	t.Helper()
	k, slot := lockertest.KeySlot(key)
	l, err := New(Config{Options: locker.Options{Key: k, Slot: slot, Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestEpochGrowsAcrossStateDirsAndReboots(t *testing.T) {
	// A lock directory on tmpfs, emptied below as a reboot empties /run.
	locks, err := os.MkdirTemp("/dev/shm", "leaderrun-test-")
	if err != nil || !volatile(locks) {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	defer os.RemoveAll(locks)
	host := t.TempDir()
	saved := hostDir
	hostDir = func(int) string { return host }
	defer func() { hostDir = saved }()

	step := epochSteps(t, locks)
	reboot := func() {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(locks, "leaderrun")); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	step(a)
	step(a)
	step(b) // another --state-dir in the same boot
	reboot()
	step(c) // and after a reboot, yet another one
	reboot()
	step(a) // the first one again: its own copy is behind
	step("")
	reboot()
	step(b)
	if _, err := os.Stat(filepath.Join(host, "leaderrun", "job.epoch")); err != nil {
		t.Fatalf("no counter in the host directory: %v", err)
	}
}

// epochSteps returns a step that takes and gives back the lock of one key
// in locks with the given state directory, and fails unless each step's
// epoch is greater than the one before.
func epochSteps(t *testing.T, locks string) func(state string) {
	opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}
	var last uint64
	return func(state string) {
		t.Helper()
		l, err := New(Config{Options: opts, Dir: locks, StateDir: state})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		if lease.Epoch() <= last {
			t.Fatalf("state dir %q: epoch %d after %d", state, lease.Epoch(), last)
		}
		last = lease.Epoch()
	}
}
