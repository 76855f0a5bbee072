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

// A key with no lock file, no epoch counter and no run records was never
// used here; once it was, a read-only Leader says "no leader" only, also
// after the lock file is gone (a reboot empties /run) while the state
// directory keeps the counter. A wrong lock directory is never used and
// named.
func TestLeaderTellsNeverUsed(t *testing.T) {
	locks, state, wrong, host := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	saved := hostDir
	hostDir = func(int) string { return host }
	defer func() { hostDir = saved }()
	opts := locker.Options{Key: "billing", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}
	reader := func(dir string) *Locker {
		l, err := New(Config{Options: opts, Dir: dir, StateDir: state, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	lockertest.NeverUsed(t, reader(locks), func() {
		l, err := New(Config{Options: opts, Dir: locks, StateDir: state})
		if err != nil {
			t.Fatal(err)
		}
		lease := lockertest.MustAcquire(t, l)
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}, locks+" (local lock dir)", "state dir "+state)

	if err := os.RemoveAll(filepath.Join(locks, "leaderrun")); err != nil {
		t.Fatal(err)
	}
	if _, err := reader(locks).Leader(context.Background()); !errors.Is(err, locker.ErrNoLeader) || errors.Is(err, locker.ErrNeverUsed) {
		t.Errorf("Leader with the lock file gone and the counter kept = %v, want ErrNoLeader only", err)
	}

	// The wrong lock directory, with its own state: nothing there.
	l, err := New(Config{Options: opts, Dir: wrong, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Leader(context.Background())
	var nu *locker.NeverUsedError
	if !errors.As(err, &nu) || nu.Where != wrong+" (local lock dir)" || nu.Key != "billing" {
		t.Fatalf("Leader in the wrong lock directory = %v, want never used at %s", err, wrong)
	}
	if names, _ := os.ReadDir(wrong); len(names) != 0 {
		t.Errorf("read-only Leader created %v", names)
	}
}
