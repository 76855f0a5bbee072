package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
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

func TestSecondCandidateWaitsOrIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newLocker(t, dir, true).Acquire(context.Background()); !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("NoWait while held: %v, want ErrHeld", err)
	}
	h, err := newLocker(t, dir, false).Leader(context.Background())
	if err != nil || h.ID != "me" || h.Epoch != first.Epoch() || h.PID != os.Getpid() {
		t.Fatalf("Leader = %+v, %v", h, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := newLocker(t, dir, false).Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting candidate: %v, want the context's deadline", err)
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
